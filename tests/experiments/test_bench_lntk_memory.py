"""experiments.bench_lntk_memory on tiny-llava: one record per scoring batch with its settings beside
its figures, and the LNTK peak under the training step's for both scoring batches."""

import json

from experiments.bench_lntk_memory import main


def test_the_benchmark_records_settings_and_peaks_per_scoring_batch(tmp_path, capsys):
    out = tmp_path / "equal.jsonl"
    main(["--model", "tiny-llava", "--dtype", "float32", "--batch-size", "4", "--score-batch-sizes", "4,8",
          "--budget", "1", "--out", str(out)])
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["scoring_batch"] for r in records] == [4, 8]
    for record in records:
        assert {"gradient_checkpointing", "batch_size", "budget", "piece", "lntk_peak_mib",
                "training_peak_least_mib"} <= set(record)
        assert record["lntk_peak_mib"] <= record["training_peak_least_mib"] < record["lntk_whole_batch_mib"]
        assert 1 <= record["piece"] < record["scoring_batch"]
    assert capsys.readouterr().out.count("| off | ") == 2
