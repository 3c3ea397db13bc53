"""Selection (`--scenario/--tag/--pack/--owner`) and packs (`pack.yaml` inheritance)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.unit.replay.test_run import AGENT_RUNTIME, cli, write_scenario
from wt_otel.replay.packs import Pack, PackCache, PackError, load_pack, origin_of
from wt_otel.replay.runner import load_all
from wt_otel.replay.scenarios import find_scenarios
from wt_otel.replay.selection import Candidate, EmptySelection, Selection, matches, select, select_scenarios

CANDIDATES = [
    Candidate("lookup_order", ("origin:incident-412", "dim:recovery"), "billing", "team-a"),
    Candidate("lookup_user", ("dim:refusal",), "accounts", "team-b"),
    Candidate("refund", ("origin:incident-7",), "billing", None),
]


def ids(selection: Selection) -> list[str]:
    return [c.id for c in select(CANDIDATES, selection, key=lambda c: c).items]


def test_and_across_flags_or_within_a_flag() -> None:
    assert ids(Selection()) == ["lookup_order", "lookup_user", "refund"]
    assert ids(Selection(scenarios=("lookup_*",))) == ["lookup_order", "lookup_user"]
    assert ids(Selection(scenarios=("lookup_*",), packs=("billing",))) == ["lookup_order"]  # AND
    assert ids(Selection(tags=("dim:recovery", "dim:refusal"))) == ["lookup_order", "lookup_user"]  # OR
    assert ids(Selection(tags=("origin:incident-*",), owners=("team-a", "team-b"))) == ["lookup_order"]
    assert ids(Selection(tags=("origin:incident-412",))) == ["lookup_order"]
    assert not matches(CANDIDATES[2], Selection(owners=("*",)))  # no owner never matches an owner selector
    assert Selection(tags=("a",), packs=("p",)).to_dict() == {"tag": ["a"], "pack": ["p"]}


def test_unknown_selectors_warn_and_an_empty_selection_raises() -> None:
    got = select(CANDIDATES, Selection(packs=("billing", "biling")), key=lambda c: c)
    assert [c.id for c in got.items] == ["lookup_order", "refund"]
    assert got.warnings == ["--pack 'biling' matches no scenario (known: accounts, billing)"]
    with pytest.raises(EmptySelection, match="--owner 'nobody'"):
        select(CANDIDATES, Selection(owners=("nobody",)), key=lambda c: c)
    with pytest.raises(EmptySelection):  # each flag matches something, but nothing matches both
        select(CANDIDATES, Selection(tags=("dim:refusal",), packs=("billing",)), key=lambda c: c)


# ---------------------------------------------------------------- packs


def scenario(root: Path, sid: str, **fields: object) -> Path:
    d = write_scenario(root, sid)
    data = yaml.safe_load((d / "scenario.yaml").read_text())
    (d / "scenario.yaml").write_text(yaml.safe_dump({**data, **fields}))
    return d


def make_tree(tmp_path: Path) -> Path:
    root = tmp_path / "scenarios"
    (root / "billing").mkdir(parents=True)
    (root / "billing" / "pack.yaml").write_text(
        "name: billing\nowner: team-billing\nmetadata:\n  model: gpt-x\n  sampler.temperature: '0'\n")
    scenario(root / "billing", "refund", tags=["origin:incident-412"])
    scenario(root / "billing" / "nested", "chargeback", owner="team-disputes", metadata={"model": "gpt-y"})
    scenario(root / "billing", "moved", pack="payments")
    scenario(root / "loose", "lookup")
    return root


def test_scenarios_inherit_pack_and_owner_unless_they_set_their_own(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    packs = PackCache()
    got = {s.id: packs.membership(s.path, s.scenario) for s in load_all(find_scenarios([root]), "live")}
    assert (got["refund"].pack, got["refund"].owner, got["refund"].origin) == ("billing", "team-billing",
                                                                                "incident-412")
    assert got["refund"].metadata == {"model": "gpt-x", "sampler.temperature": "0"}
    assert (got["chargeback"].pack, got["chargeback"].owner) == ("billing", "team-disputes")  # nearest pack.yaml
    assert got["chargeback"].metadata["model"] == "gpt-y"  # the scenario's own metadata wins
    assert (got["moved"].pack, got["moved"].owner) == ("payments", "team-billing")
    assert (got["lookup"].pack, got["lookup"].owner, got["lookup"].pack_file) == (None, None, None)


def test_pack_yaml_is_strict(tmp_path: Path) -> None:
    (tmp_path / "pack.yaml").write_text("name: billing\nownr: team\n")
    with pytest.raises(PackError, match="ownr"):
        load_pack(tmp_path / "pack.yaml")
    (tmp_path / "pack.yaml").write_text("name: 12\n")
    with pytest.raises(PackError, match="name"):
        load_pack(tmp_path / "pack.yaml")
    (tmp_path / "pack.yaml").write_text("- not a mapping\n")
    with pytest.raises(PackError, match="must be a mapping"):
        load_pack(tmp_path / "pack.yaml")
    assert Pack(name="p").owner is None and origin_of(["x", "origin: inc-1 ", "origin:b"]) == "inc-1"


def test_the_pack_search_stops_at_a_repository_root(tmp_path: Path) -> None:
    (tmp_path / "pack.yaml").write_text("name: outside\n")
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    d = scenario(tmp_path / "repo", "inside")
    assert PackCache().pack_for(d) == (None, None)


# ---------------------------------------------------------------- `wt-otel run` selection


def run(tmp_path: Path, root: Path, *args: str) -> object:
    return cli("run", str(root), "--runtime", AGENT_RUNTIME, "--universe-port", "0",
               "--runs-dir", str(tmp_path / "runs"), *args)


def test_run_selects_by_pack_owner_tag_and_glob(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    res = run(tmp_path, root, "--pack", "billing", "--owner", "team-billing", "--owner", "team-disputes",
              "--tag", "nope:*", "--tag", "origin:incident-412", "--tag", "origin:*")
    assert res.exit_code == 0, res.output
    rows = [line.split()[1] for line in res.output.splitlines() if line.startswith("PASS ")]
    assert rows == ["refund"]
    assert "warning: --tag 'nope:*' matches no scenario" in res.output
    [ledger] = [json.loads(line) for line in (tmp_path / "runs" / "ledger.ndjsonl").read_text().splitlines()]
    assert (ledger["scenario_id"], ledger["pack"], ledger["owner"], ledger["model"]) == (
        "refund", "billing", "team-billing", "gpt-x")
    assert ledger["sampler"] == {"temperature": "0"}
    res = run(tmp_path, root, "--scenario", "*o*", "--out", str(tmp_path / "r.json"))
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [s["scenario_id"] for s in doc["scenarios"]] == ["moved", "lookup"]
    assert doc["selection"] == {"scenario": ["*o*"]}


@pytest.mark.parametrize("args", [["--owner", "nobody"], ["--pack", "billing", "--scenario", "lookup"]])
def test_run_empty_selection_is_exit_2(tmp_path: Path, args: list[str]) -> None:
    root = make_tree(tmp_path)
    res = run(tmp_path, root, *args)
    assert res.exit_code == 2 and "no scenario selected by" in res.output
    assert not (tmp_path / "runs").exists()


def test_run_with_an_invalid_pack_yaml_is_exit_2(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    (root / "billing" / "pack.yaml").write_text("name: billing\nowners: [a]\n")
    res = run(tmp_path, root)
    assert res.exit_code == 2 and "pack.yaml: owners" in res.output
    loaded = load_all(find_scenarios([root / "loose"]), "live")
    assert [s.id for s in select_scenarios(loaded, Selection()).items] == ["lookup"]  # other folders unaffected
