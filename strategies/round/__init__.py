"""The parts of `strategies.layer_selection.LayerSelectionStrategy`, one per phase of a round:
`clients` (who is connected, sampling, sending an exchange), `train` (masks from the reports,
the train exchange, aggregation), `close` (the exchange that closes a round: evaluation and the
next round's scores) and `log` (what a round records)."""
