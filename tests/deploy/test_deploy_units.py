"""deploy/: credentials and the launcher's argument handling, without starting any process."""

from __future__ import annotations

import argparse
import ipaddress
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_ssh_private_key
from flwr.cli.supernode.register import try_load_public_key
from flwr.common.config import parse_config_args

from deploy.launch import Node, core_shares, node_config_arg, parse_nodes, site_nodes, with_node_budgets
from deploy.make_certs import make_credentials, make_node_keys


@pytest.fixture(scope="module")
def creds(tmp_path_factory):
    return make_credentials(tmp_path_factory.mktemp("creds"), ["site-a", "site-b"])


def test_server_certificate_is_signed_by_the_ca_for_loopback_names(creds):
    cert = x509.load_pem_x509_certificate(creds.server_cert.read_bytes())
    ca = x509.load_pem_x509_certificate(creds.ca_cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(creds.server_cert, creds.server_key)  # key matches certificate
    assert creds.server_key.stat().st_mode & 0o077 == 0


def test_node_keys_load_the_way_flower_loads_them(creds):
    for private, public in creds.node_keys.values():
        key = load_ssh_private_key(private.read_bytes(), None)  # flower-supernode's loader
        assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp384r1"
        assert try_load_public_key(public)  # `flwr supernode register`'s loader
        assert private.stat().st_mode & 0o077 == 0


def test_a_site_makes_only_its_own_key_pair(tmp_path):
    keys = make_node_keys(tmp_path, ["site-c"])
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == ["site-c", "site-c.pub"]
    assert list(keys) == ["site-c"] and not (tmp_path / "ca.crt").exists()


@pytest.mark.parametrize("nodes, hosts, match", [
    (["a b"], ["127.0.0.1"], "not a valid node name"),
    (["x", "x"], ["127.0.0.1"], "must be unique"),
    (["x"], [], "hosts"),
])
def test_bad_credential_requests_name_the_problem(tmp_path, nodes, hosts, match):
    with pytest.raises(ValueError, match=match):
        make_credentials(tmp_path, nodes, hosts)


def test_node_config_round_trips_through_flowers_parser(tmp_path):
    config = {"layer-budget": 2, "dataset": "synthetic", "partition-id": 0, "num-partitions": 3,
              "device": "cpu", "state-dir": str(tmp_path / "a b"), "score": 1.5, "flag": True}
    assert parse_config_args([node_config_arg(config)]) == config
    with pytest.raises(ValueError, match="node config value"):
        node_config_arg({"x": None})


def test_site_nodes_split_one_data_set_and_keep_state_per_site(tmp_path):
    nodes = site_nodes(["1", "auto", "3"], "synthetic", "cpu", tmp_path)
    assert [n.config["layer-budget"] for n in nodes] == [1, "auto", 3]
    assert [n.config["partition-id"] for n in nodes] == [0, 1, 2]
    assert {n.config["num-partitions"] for n in nodes} == {3}
    assert len({n.config["state-dir"] for n in nodes}) == 3
    with pytest.raises(ValueError, match="positive int or 'auto'"):
        site_nodes(["0"], "synthetic", "cpu", tmp_path)


def test_run_config_gets_the_node_budgets_unless_it_sets_its_own():
    nodes = [Node("a", {"layer-budget": 1}), Node("b", {"layer-budget": "auto"})]
    assert with_node_budgets("model='tiny-vilt'", nodes) == "budgets='1,auto' model='tiny-vilt'"
    assert with_node_budgets("budgets='4' x=1", nodes) == "budgets='4' x=1"
    assert with_node_budgets("x=1", [Node("c", {})]) == "x=1"


def test_node_config_strings_from_the_command_line(tmp_path):
    args = argparse.Namespace(node_config=["layer-budget=2 data-dir='/data/a'", "layer-budget='auto'"],
                              budgets="", dataset="synthetic", device="cpu")
    nodes = parse_nodes(args, tmp_path)
    assert nodes[0].config["data-dir"] == "/data/a" and nodes[1].config["layer-budget"] == "auto"
    assert nodes[0].config["state-dir"] == str(tmp_path / "sites" / "site-0" / "state")
    for bad in ("layer-budget=", "data-dir='/unterminated"):
        with pytest.raises(ValueError, match="--node-config"):
            parse_nodes(argparse.Namespace(node_config=[bad], budgets=""), tmp_path)
    with pytest.raises(ValueError, match="--budgets"):
        parse_nodes(argparse.Namespace(node_config=[], budgets=" , ", dataset="d", device="cpu"),
                    Path(tmp_path))


@pytest.mark.parametrize("sites, cores, shares", [
    (3, 2, [1, 1, 1]), (3, 8, [3, 3, 2]), (2, 2, [1, 1]), (1, 16, [16]), (4, 6, [2, 2, 1, 1]),
])
def test_launch_divides_the_cores_among_the_sites(sites, cores, shares):
    assert core_shares(sites, cores) == shares


def test_every_launched_site_gets_its_share_of_threads_unless_its_node_config_sets_one(tmp_path):
    shares = core_shares(3)
    assert [n.config["num-threads"] for n in site_nodes(["1", "2", "3"], "synthetic", "cpu", tmp_path)] \
        == shares
    args = argparse.Namespace(node_config=["layer-budget=2 num-threads=7", "layer-budget=1"], budgets="")
    nodes = parse_nodes(args, tmp_path)
    assert [n.config["num-threads"] for n in nodes] == [7, core_shares(2)[1]]
