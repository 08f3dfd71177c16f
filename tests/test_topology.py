"""Slurm topology: the 16 real topology files of the corpus, placement, ibnetdiscover dumps, and
`clustercheck topology` as users run it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORPUS, cli

from clustercheck.analyzers.topology import (
    Topology,
    TopologyError,
    compare,
    fabric_topology,
    oversubscription,
    parse_ibnetdiscover,
    parse_node_map,
    parse_slurm_conf,
    parse_topology,
    parse_topology_conf,
    parse_topology_yaml,
    place,
    read_conf_lines,
    render_topology_conf,
)
from clustercheck.result import Status

TOPO = CORPUS / "slurm_topology"
IB = CORPUS / "ib_tools"
X5_DUMP = IB / "psmn-x5-ibnetdiscover-qdr-voltaire-2020.txt"
X5_CONF = TOPO / "psmn-x5-generated-from-ibnetdiscover-topology.conf.txt"
SUPERBENCH = IB / "superbench-ibnetdiscover-hdr-fattree-FAKED.txt"

# The HCA-to-host map PSMN fed ibmap2slurm.py with the X5 dump to make X5_CONF:
# ltaulell/HPC_toolset:infiniband/X5.map@be176026ccdd3deb2675af6e4b225200454303bd (whole file).
X5_MAP = """# cluster X5
H-003048c74e4a0000 x5570comp1
H-003048c7488b0000 x5570comp2
H-0002c90300080e84 r510gluster1
H-0002c90300080d58 r510gluster2
H-0002c90300080d3c r510gluster3
H-0002c90300080d28 r510gluster4
H-78e7d10300227744 sl390lin1
H-78e7d103002276bc sl390lin2
H-78e7d1030022a0dc sl390lin3
H-78e7d1030022cae4 sl390lin4
H-78e7d1030022a954 sl390lin5
H-78e7d10300227d14 sl390lin7
H-78e7d10300227e64 sl390lin8
H-78e7d1030022805c sl390lin9
H-78e7d1030022cb84 sl390lin10
H-78e7d1030022964c sl390lin11
H-78e7d1030022a91c sl390lin13
H-78e7d10300229e94 sl390lin14
H-78e7d1030022ccb4 sl390lin15
H-78e7d1030022cb74 sl390lin16
H-78e7d1030022a83c sl390lin17
H-78e7d1030022a914 sl390lin18
H-78e7d10300229634 sl390lin20
H-78e7d103002296ec sl390lin21
H-78e7d1030022773c sl390lin22
H-78e7d103002297fc sl390lin24
H-78e7d10300229794 sl390lin25
H-78e7d10300228e94 sl390lin26
H-78e7d1030022977c sl390lin27
H-78e7d1030022804c sl390lin28
H-78e7d10300223514 sl390lin29
H-78e7d103002296cc sl390lin33
H-78e7d10300228ce4 sl390lin34
H-78e7d1030022cc4c sl390lin37
H-78e7d1030022a46c sl390lin101
H-78e7d1030022a474 sl390lin102
H-78e7d1030022a47c sl390lin103
H-78e7d10300229bdc sl390lin104
H-78e7d10300229bd4 sl390lin105
H-78e7d10300229bfc sl390lin106
H-78e7d10300229674 sl390lin107
H-78e7d1030022c76c sl390lin108
H-78e7d10300229be4 sl390lin109
H-78e7d1030022c7d4 sl390lin110
H-78e7d1030022c6a4 sl390lin111
H-78e7d10300229724 sl390lin112
H-78e7d1030022c77c sl390lin113
H-78e7d1030022ce2c sl390lin114
H-78e7d103002297ec sl390lin115
H-78e7d10300229bcc sl390lin116
H-78e7d103002301dc sl390lin117
H-78e7d10300229694 sl390lin118
H-78e7d10300229b14 sl390lin119
H-78e7d103002297f4 sl390lin120
H-78e7d10300229714 sl390lin121
H-78e7d1030022971c sl390lin122
H-78e7d1030022972c sl390lin123
H-78e7d10300229c24 sl390lin124
H-0002c90300048eba r815lin104
H-0002c903000482cc r815lin105
H-0002c9030004823c r815lin106
H-0002c90300048208 r815lin107
H-0002c9030004829c r815lin110
H-0002c903000482d4 r815lin111
H-0002c90300048288 r815lin112
H-0002c903000482f8 r815lin113
H-0002c90300048248 r815lin114
H-003048c749820000 r422node1
H-003048c749cd0000 r422node2
H-003048c749190000 r422node5
H-003048c74ed00000 r422node6
H-003048c749ba0000 r422node7
H-003048c749bb0000 r422node8
H-003048c74a320000 r422node15
H-003048c74a280000 r422node16
H-003048c74a650000 r422node35
H-003048c74abf0000 r422node36
H-003048c74bb20000 r422node39
H-003048c747c60000 r422node40
H-003048c748c60000 r422node57
H-003048c749000000 r422node65
H-003048c748c70000 r422node66
H-003048c707b60000 r422node69
H-003048c74ea50000 r422node70
H-003048c707c20000 r422node103
H-003048c748b00000 r422node104
"""


def corpus(name: str) -> Topology:
    path = TOPO / name
    return parse_topology(path.read_text(), name.removesuffix(".txt"))


def statuses(topo: Topology) -> list[str]:
    return [f.status.value for f in topo.findings]


# -- the 16 real files -------------------------------------------------------------------------------

# file: (kind, switches, levels, leaves, nodes, top switches, finding statuses)
EXPECTED = {
    "cinek810-slurm-test-docker-topology.conf.txt": ("tree", 7, 3, 4, 8, ["main1"], []),
    "gcp-slurm-v6-cloud_topology.yaml-tree-expected.yaml.txt": ("tree", 16, 3, 11, 28, ["s0", "s1"], ["warn"]),
    "maatthias-slurm-cluster-topology.conf.txt": ("tree", 4, 1, 4, 39, ["s0", "s1", "s2", "s3"], ["warn"]),
    "nstda-hpc-test-suite-topology.conf.txt": ("tree", 5, 2, 4, 10, ["s4"], []),
    "psmn-x5-generated-from-ibnetdiscover-topology.conf.txt": (
        "tree",
        11,
        2,
        6,
        89,
        ["S-0008f10500108c5c", "S-0008f10500108098"],
        ["fail"],
    ),
    "schedmd-doc-topology.shtml-example1.conf.txt": ("tree", 7, 3, 4, 8, ["s6"], []),
    "schedmd-doc-topology.shtml-example2-linkspeed.conf.txt": ("tree", 8, 2, 4, 16, ["s4", "s5", "s6", "s7"], []),
    "schedmd-man5-topology.yaml-EXAMPLE.yaml.txt": ("tree", 3, 2, 2, 4, ["sw_root"], []),
    "schedmd-testsuite-backfill-block-topology.conf.txt": ("block", 8, 1, 8, 32, None, []),
    "schedmd-testsuite-testcase1-3level-tree-topology.conf.txt": ("tree", 529, 4, 500, 10000, ["root"], []),
    "schedmd-testsuite-testcase2-unbalanced-topology.conf.txt": ("tree", 528, 4, 500, 10000, ["root"], []),
    "schedmd-testsuite-testcase4-topology.conf.txt": ("tree", 22, 2, 20, 400, ["grp10", "grp11"], ["warn"]),
    "schedmd-testsuite-testcase6-disconnected-topology.conf.txt": (
        "tree",
        7,
        2,
        5,
        40,
        ["spineA", "spineB", "leafC"],
        ["warn"],
    ),
    "someone2loveit-slurm_conf-topology.conf.txt": ("tree", 1, 1, 1, 1, ["SwitchBidon"], []),
    "tonystarkiss-slurm-superpod-topology.conf.txt": (
        "tree",
        5,
        1,
        5,
        79,
        ["s0", "s1", "s2", "s3", "s4"],
        ["warn", "warn", "warn"],
    ),
    "unsw-rocks-abacus-topology.conf.txt": ("tree", 5, 2, 4, 13, ["abacusc-net"], []),
}


def test_the_table_covers_the_whole_corpus_folder() -> None:
    assert sorted(EXPECTED) == sorted(p.name for p in TOPO.iterdir())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_topology(name: str) -> None:
    kind, switches, levels, leaves, nodes, roots, found = EXPECTED[name]
    topo = corpus(name)
    assert (topo.kind, len(topo.switches), topo.levels, len(topo.leaves), len(topo.nodes)) == (
        kind,
        switches,
        levels,
        leaves,
        nodes,
    )
    if roots is not None:
        assert topo.roots == roots
    assert sorted(statuses(topo)) == sorted(found), [str(f) for f in topo.findings]
    for f in topo.findings:  # every finding says where
        assert f.file and (f.line is None or f.line > 0)


def test_unbalanced_tree_levels_follow_slurm() -> None:
    # root mixes im0 (level 2) and grp23..35 (level 1): root is 1 + its highest child
    topo = corpus("schedmd-testsuite-testcase2-unbalanced-topology.conf.txt")
    assert topo.level["root"] == 3 and topo.level["im0"] == 2 and topo.level["grp23"] == 1
    assert topo.level["leaf100"] == 0
    assert topo.covered("root") == frozenset(topo.nodes)


def test_psmn_generated_file_is_not_a_tree_for_slurmctld() -> None:
    topo = corpus("psmn-x5-generated-from-ibnetdiscover-topology.conf.txt")
    (loop,) = topo.findings
    assert loop.status is Status.FAIL and "Switch configuration is not a tree" in loop.message
    # the three spines that list each other, with their lines
    for name, line in (("S-0008f1050010851e", 3), ("S-0008f105001086a2", 4), ("S-0008f10500108530", 11)):
        assert f"{name} (line {line})" in loop.message
    assert topo.level["S-0008f1050010851e"] is None
    # unmapped hosts kept as GUID names, mixed with hostlist ranges
    assert "H-78e7d1030024535c" in topo.switches["S-0008f1050020369c"].nodes


def test_tonystarkiss_node_under_two_leaves_and_missing_prefix() -> None:
    topo = corpus("tonystarkiss-slurm-superpod-topology.conf.txt")
    messages = {f.line: f.message for f in topo.findings}
    assert "circe-n051 is under 2 leaf switches: s2 (line 3), s4 (line 5)" in messages[5]
    assert topo.node_leaves["circe-n051"] == ["s2", "s4"]
    prefix = next(f for f in topo.findings if "prefix" in f.message)
    assert prefix.line == 1 and "n[019-020] under s0 look like circe-n[019-020]" in prefix.message


def test_disconnected_trees_name_their_tops() -> None:
    topo = corpus("schedmd-testsuite-testcase6-disconnected-topology.conf.txt")
    (f,) = topo.findings
    assert "3 top switches (spineA (line 7), spineB (line 11), leafC (line 15))" in f.message
    assert f.line == 7


def test_yaml_picks_cluster_default_or_the_named_entry() -> None:
    text = (TOPO / "schedmd-man5-topology.yaml-EXAMPLE.yaml.txt").read_text()
    assert parse_topology_yaml(text).name == "topo1"
    block = parse_topology_yaml(text, name="topo2")
    assert block.kind == "block" and block.block_sizes == (4, 16) and block.switches["b3"].line == 23
    flat = parse_topology_yaml(text, name="topo3")
    assert flat.kind == "flat" and not flat.switches
    assert parse_topology_yaml(text, name="topo5").kind == "torus3d"
    assert block.others == ("topo1", "topo3", "topo3a", "topo4", "topo5")
    with pytest.raises(TopologyError, match="no topology named 'nope'; it defines topo1, topo2"):
        parse_topology_yaml(text, name="nope")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 5000, "nested too deep|YAML"),
        ("- topology: a\n  tree: {switches: [{switch: s0, nodes: 'n[1-'}]}\n", r"y:2: nodes: bad hostlist"),
        ("- topology: a\n  tree:\n    switches:\n      - switch: s0\n        speed: 9\n", r"y:5: unknown switch key"),
        ("- topology: a\n  tree: {}\n  block: {}\n", "must define exactly one of"),
        ("{a: 1}\n", "expected a list of `- topology: NAME` entries"),
        ("- topology: a\n  cluster_default: true\n  block:\n    block_sizes: [x]\n", "y:4: block_sizes"),
    ],
)
def test_bad_topology_yaml_is_named(text: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        parse_topology_yaml(text, "y")


def test_gcp_generated_yaml_expands_children_hostlists() -> None:
    topo = corpus("gcp-slurm-v6-cloud_topology.yaml-tree-expected.yaml.txt")
    assert topo.switches["s0"].children == ("s0_0", "s0_1", "s0_2", "s0_3", "s0_4")
    assert topo.switches["s0_3"].nodes == ("m22-green-0", "m22-green-1", "m22-green-2", "m22-green-4")
    assert topo.level["s0"] == 2 and topo.switches["s0_0_0"].line == 9


def test_tabs_trailing_blank_lines_and_no_final_newline() -> None:
    unsw = corpus("unsw-rocks-abacus-topology.conf.txt")  # TAB between SwitchName= and Nodes=
    assert unsw.switches["abacusc-neta"].nodes == ("abacus",)
    assert unsw.switches["abacusc-net"].children == ("abacusc-0", "abacusc-1", "abacusc-2", "abacusc-neta")
    nstda = corpus("nstda-hpc-test-suite-topology.conf.txt")  # no trailing newline
    assert nstda.switches["s4"].children == ("s0", "s1", "s2", "s3")
    docker = corpus("cinek810-slurm-test-docker-topology.conf.txt")
    assert docker.switches["main1"].children == ("SW14", "SW58")
    speed = corpus("schedmd-doc-topology.shtml-example2-linkspeed.conf.txt")
    assert speed.switches["s3"].link_speed == 1800


# -- syntax and what slurmctld refuses ------------------------------------------------------------------


def test_conf_syntax_comments_continuations_case_and_spaces() -> None:
    text = (
        "# comment\n"
        "switchname=s0 NODES=tux[0-1] # trailing comment\n"
        "SwitchName = s1 \\\n"
        "   Nodes = tux[2-3]\n"
        'SwitchName=s2 Switches="s[0-1]"\n'
        "SwitchName=s3 Nodes=a\\#b\n"
    )
    topo = parse_topology_conf(text)
    assert topo.switches["s1"].nodes == ("tux2", "tux3") and topo.switches["s1"].line == 3
    assert topo.switches["s2"].children == ("s0", "s1")
    assert topo.switches["s3"].nodes == ("a#b",)
    lines = read_conf_lines("A=1 B = 2\n", "f")
    assert lines[0].pairs == (("A", "1"), ("B", "2"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SwitchName=s0 Nodes=tux[0-3\n", r"t\.conf:1: SwitchName=s0 Nodes=: bad hostlist 'tux\[0-3'"),
        ("\nSwitchName=s0 Nodes=a Foo=1\n", r"t\.conf:2: unknown key 'Foo' on a SwitchName line"),
        ("Nodes=a\n", r"t\.conf:1: unknown key 'Nodes': topology.conf lines start with SwitchName="),
        ("SwitchName=s0 LinkSpeed=fast Nodes=a\n", r"t\.conf:1: LinkSpeed=fast: expected a whole number"),
        ("SwitchName=s0 Nodes=\n", r"t\.conf:1: cannot read 'Nodes='"),
        ("SwitchName=s0 garbage\n", r"t\.conf:1: cannot read 'garbage'"),
        ("SwitchName=s0 Nodes=a\nBlockName=b Nodes=c\n", "mixes SwitchName= .* and BlockName="),
        ("SwitchName=s0 Nodes=a Nodes=b\n", "Nodes is given twice"),
        ("BlockSizes=4,x\n", r"t\.conf:1: BlockSizes=4,x: expected numbers"),
    ],
)
def test_unreadable_lines_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        parse_topology_conf(text, "t.conf")


@pytest.mark.parametrize(
    ("text", "status", "message"),
    [
        ("SwitchName=s0 Nodes=a\nSwitchName=s0 Nodes=b\n", "fail", "defined twice (first at line 1)"),
        ("SwitchName=s0 Nodes=a Switches=s1\nSwitchName=s1 Nodes=b\n", "fail", "both Nodes= and Switches="),
        ("SwitchName=s0 Nodes=a\nSwitchName=s1 Switches=s0,s9\n", "fail", "lists child s9, which is no switch"),
        ("SwitchName=s1 Switches=s1\n", "fail", "lists child s1, which is itself"),
        ("SwitchName=s0 Nodes=a\nSwitchName=s1\n", "warn", "s1 has neither Nodes= nor Switches="),
        (f"SwitchName={'x' * 65} Nodes=a\n", "fail", "is 65 characters long; Slurm allows 64"),
        ("", "fail", "defines no switch and no block"),
        ("BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-6]\nBlockSizes=4,12\n", "fail", "power of two"),
        ("BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-6]\nBlockSizes=4\n", "warn", "b2 has 2 nodes, fewer"),
    ],
)
def test_what_slurmctld_refuses_or_warns_about(text: str, status: str, message: str) -> None:
    topo = parse_topology_conf(text, "t.conf")
    assert any(f.status.value == status and message in f.message for f in topo.findings), [
        str(f) for f in topo.findings
    ]


def test_a_tree_deeper_than_slurm_resolves_fails() -> None:
    lines = ["SwitchName=l0 Nodes=n1"] + [f"SwitchName=l{i} Switches=l{i - 1}" for i in range(1, 23)]
    topo = parse_topology_conf("\n".join(lines))
    assert topo.levels == 23
    assert any("slurmctld gives up after 20" in f.message for f in topo.findings)


# -- placement ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "nodes", "status", "spanned", "needed", "common"),
    [
        ("unsw-rocks-abacus-topology.conf.txt", "abacusc-0-[0-1]", "ok", 1, 1, "abacusc-0"),
        ("unsw-rocks-abacus-topology.conf.txt", "abacusc-0-[0-1],abacusc-1-[0-1]", "warn", 2, 1, "abacusc-net"),
        ("unsw-rocks-abacus-topology.conf.txt", "abacusc-0-[0-3],abacusc-1-0", "ok", 2, 2, "abacusc-net"),
        ("unsw-rocks-abacus-topology.conf.txt", "abacusc-0-0,bogus1", "fail", 1, 1, "abacusc-0"),
        ("schedmd-testsuite-testcase1-3level-tree-topology.conf.txt", "peta[10000-10039]", "ok", 2, 2, "grp10"),
        (
            "schedmd-testsuite-testcase1-3level-tree-topology.conf.txt",
            "peta[10000-10009,10390-10399]",
            "warn",
            2,
            1,
            "grp10",
        ),
        ("schedmd-testsuite-testcase1-3level-tree-topology.conf.txt", "peta[10000,19999]", "warn", 2, 1, "root"),
        ("schedmd-testsuite-testcase6-disconnected-topology.conf.txt", "node[1,17]", "fail", 2, 1, None),
        ("schedmd-testsuite-testcase6-disconnected-topology.conf.txt", "node[1-8]", "ok", 1, 1, "leafA1"),
        ("schedmd-testsuite-backfill-block-topology.conf.txt", "node[01-05]", "ok", 2, 2, None),
        ("schedmd-testsuite-backfill-block-topology.conf.txt", "node[01,05]", "warn", 2, 1, None),
        ("tonystarkiss-slurm-superpod-topology.conf.txt", "circe-n051", "warn", 2, 1, "s2"),
    ],
)
def test_placement(name: str, nodes: str, status: str, spanned: int, needed: int, common: str | None) -> None:
    from clustercheck.hostlist import expand

    topo = corpus(name)
    where = place(topo, expand(nodes))
    assert (where.status.value, len(where.leaves_spanned), where.min_leaves, where.common_switch) == (
        status,
        spanned,
        needed,
        common,
    ), where.summary


def test_placement_summaries_give_the_numbers() -> None:
    from clustercheck.hostlist import expand

    topo = corpus("schedmd-testsuite-testcase1-3level-tree-topology.conf.txt")
    where = place(topo, expand("peta[10000-10009,10390-10399]"))
    assert where.summary == (
        "20 nodes span 2 leaf switches (leaf100, leaf119); 1 would hold them; lowest common switch grp10 (level 1)"
    )
    far = place(topo, expand("peta[10000,19999]"))
    assert (far.common_switch, far.common_level) == ("root", 3)
    ok_place = place(topo, expand("peta[10000-10039]"))
    assert ok_place.summary == (
        "40 nodes under 2 leaf switches (leaf100, leaf101), as few as possible; lowest common switch grp10 (level 1)"
    )
    split = place(corpus("schedmd-testsuite-testcase6-disconnected-topology.conf.txt"), ["node1", "node17"])
    assert "2 trees with no common switch (tops: spineA, spineB)" in split.summary


# -- slurm.conf -------------------------------------------------------------------------------------------


def test_slurm_conf_includes_defaults_and_spaces() -> None:
    main = "NodeName=DEFAULT Gres=gpu:4\nInclude nodes.conf\nTopologyPlugin = topology/tree\n"
    included = {"nodes.conf": "NodeName=gpu[01-02] CPUs=8\nNodeName=DEFAULT CPUs=2\nNodeName=cpu01\n"}
    conf = parse_slurm_conf(main, "slurm.conf", lambda p: (p, included[p]))
    assert conf.get("topologyplugin") == "topology/tree" and conf.where("TopologyPlugin") == "slurm.conf:3"
    assert conf.nodes["gpu02"].params["gres"] == "gpu:4" and conf.nodes["gpu02"].source == "nodes.conf"
    # DEFAULT values hold until changed, as in Slurm
    assert conf.nodes["cpu01"].params == {"gres": "gpu:4", "cpus": "2"} and conf.nodes["cpu01"].line == 3
    with pytest.raises(TopologyError, match=r"slurm\.conf:2: Include nodes\.conf: cannot follow includes here"):
        parse_slurm_conf(main)


# -- ibnetdiscover -----------------------------------------------------------------------------------------


def test_x5_dump_switches_hcas_and_cables() -> None:
    fabric = parse_ibnetdiscover(X5_DUMP.read_text(), X5_DUMP.name)
    assert len(fabric.switches) == 11 and len(fabric.hcas) == 89
    assert fabric.nodes["S-0008f10500200b50"].lid == 9
    assert fabric.nodes["S-0008f105002036b4"].description == "Voltaire 4036 # hoibp0013"
    cables: dict[frozenset[tuple[str, int]], str] = {}
    for node in fabric.nodes.values():
        for link in node.links:
            cables[frozenset({(node.name, link.port), (link.remote, link.remote_port)})] = link.speed
    # MANIFEST: 272 QDR / 46 DDR port lines, i.e. 136 and 23 cables, each listed at both ends
    assert sorted(cables.values()).count("4xQDR") == 136 and sorted(cables.values()).count("4xDDR") == 23


def test_x5_fabric_with_the_site_map_gives_the_site_tree() -> None:
    fabric = parse_ibnetdiscover(X5_DUMP.read_text(), X5_DUMP.name)
    tree = fabric_topology(fabric, parse_node_map(X5_MAP, "X5.map"))
    assert tree.levels == 3 and len(tree.nodes) == 86
    assert tree.roots == ["S-0008f105001086a2", "S-0008f10500108098", "S-0008f10500108c5c"]
    assert tree.switches["S-0008f105002036b4"].nodes == tuple(f"sl390lin{i}" for i in range(101, 125))
    assert tree.covered("S-0008f10500108098") == frozenset(tree.nodes)  # a spine reaches every host
    (unnamed,) = [f for f in tree.findings if "without a Slurm node name" in f.message]
    assert unnamed.message.startswith("3 HCAs without a Slurm node name")
    # the generated file is one slurmctld accepts, unlike the site's generated one (a loop)
    text = render_topology_conf(tree, ["test"])
    again = parse_topology_conf(text, "gen.conf")
    assert again.status is Status.OK and again.levels == 3
    assert {n: again.node_leaves[n] for n in again.nodes} == {n: tree.node_leaves[n] for n in tree.nodes}
    assert "H-003048c749450000" in text  # the unnamed HCAs are named in a comment


def test_x5_site_conf_matches_its_fabric_but_for_the_loop() -> None:
    fabric = parse_ibnetdiscover(X5_DUMP.read_text(), X5_DUMP.name)
    tree = fabric_topology(fabric, parse_node_map(X5_MAP), guid_names=True)
    conf = parse_topology_conf(X5_CONF.read_text(), "X5.topology.conf")
    assert [f for f in compare(fabric, tree, conf) if f.status is not Status.OK] == []
    assert conf.status is Status.FAIL  # ... but slurmctld would refuse the file itself


def _edited_compare(*edits: tuple[str, str]) -> list[str]:
    fabric = parse_ibnetdiscover(X5_DUMP.read_text(), X5_DUMP.name)
    tree = fabric_topology(fabric, parse_node_map(X5_MAP), guid_names=True)
    text = render_topology_conf(tree)
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    conf = parse_topology_conf(text, "edited.conf")
    return [f"{f.status.value} {f}" for f in compare(fabric, tree, conf)]


def test_compare_finds_a_node_under_the_wrong_leaf() -> None:
    found = _edited_compare(
        ("Nodes=sl390lin[101-124]", "Nodes=sl390lin[101-120,122-124]"),
        ("Nodes=r815lin[104-107,110-114]", "Nodes=r815lin[104-107,110-114],sl390lin121"),
    )
    assert len(found) == 1 and re.match(
        r"fail edited.conf:\d+: sl390lin121: topology.conf puts it under S-0002c902004827b0, but the cables go to "
        r"S-0008f105002036b4",
        found[0],
    ), found


def test_compare_finds_missing_links() -> None:
    found = _edited_compare(("Nodes=sl390lin[101-124]", "Nodes=sl390lin[101-125]"))
    assert any("fail edited.conf:" in f and "sl390lin125 (1 under S-0008f105002036b4) has no link" in f for f in found)
    # a switch link topology.conf claims that no cable makes: 86a2 is cabled to two spines only
    found = _edited_compare(
        (
            "SwitchName=S-0008f105001086a2 Switches=S-0008f1050010851e,S-0008f10500108530",
            "SwitchName=S-0008f105001086a2 Switches=S-0008f1050010851e,S-0008f10500108530,S-0008f10500108bba",
        )
    )
    assert any("links S-0008f105001086a2 to S-0008f10500108bba, but" in f and f.startswith("fail") for f in found)
    # and a cable topology.conf leaves out
    found = _edited_compare(
        (
            "SwitchName=S-0008f105001086a2 Switches=S-0008f1050010851e,S-0008f10500108530",
            "SwitchName=S-0008f105001086a2 Switches=S-0008f1050010851e",
        )
    )
    assert any(f.startswith("warn") and "cables S-0008f105001086a2 to S-0008f10500108530, but" in f for f in found)


def test_compare_matches_switches_by_nodes_and_cables_when_names_differ() -> None:
    fabric = parse_ibnetdiscover(X5_DUMP.read_text(), X5_DUMP.name)
    tree = fabric_topology(fabric, parse_node_map(X5_MAP), guid_names=True)
    text = render_topology_conf(tree)
    for i, guid in enumerate(sorted(set(re.findall(r"S-[0-9a-f]{16}", text)))):
        text = text.replace(guid, f"sw{i}")  # a site's own switch names
    assert compare(fabric, tree, parse_topology_conf(text, "renamed.conf")) == []
    text = text.replace("Nodes=sl390lin[101-124]", "Nodes=sl390lin[101-120,122-124]")
    text = text.replace("Nodes=r815lin[104-107,110-114]", "Nodes=r815lin[104-107,110-114],sl390lin121")
    (found,) = compare(fabric, tree, parse_topology_conf(text, "renamed.conf"))
    assert found.message == (
        "sl390lin121: topology.conf puts it under sw1, but the cables go to S-0008f105002036b4 "
        "(which topology.conf calls sw10)"
    )


def test_superbench_names_from_node_descriptions_and_no_aggregation_node() -> None:
    fabric = parse_ibnetdiscover(SUPERBENCH.read_text(), SUPERBENCH.name)
    tree = fabric_topology(fabric)
    assert tree.roots == ["S-0ff08c43213b3f30"] and tree.levels == 3
    assert "RMD701091901003" in tree.nodes and len(tree.nodes) == 10  # "RMD701091901003 ibp11s0f0"
    # the dump's first switch lists an aggregation node it does not describe: said, not guessed
    assert any("H-0ff08c43213b3f38" in f.message and "truncated" in f.message for f in tree.findings)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello\n", "x:1: not an ibnetdiscover line: 'hello'"),
        ('[1]\t"S-01"[2]\n', "x:1: a port line before any Switch/Ca line"),
        ("# only a comment\n", "x: no Switch or Ca in it"),
    ],
)
def test_garbage_dumps_are_named(text: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        parse_ibnetdiscover(text, "x")


def test_node_map_formats() -> None:
    names = parse_node_map('H-003048c74e4a0000 x5570comp1\n0x0002c90300080e84 "r510gluster1 HCA-1"\n# c\n')
    assert names == {"003048c74e4a0000": "x5570comp1", "0002c90300080e84": "r510gluster1"}
    with pytest.raises(TopologyError, match="m:1: 'zz' is not a GUID"):
        parse_node_map("zz name\n", "m")


# -- properties ------------------------------------------------------------------------------------------

_names = st.from_regex(r"[a-z]{1,4}", fullmatch=True)


@st.composite
def trees(draw: st.DrawFn) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """A random tree: leaves with nodes, upper switches with children one level down."""
    leaves: dict[str, list[str]] = {}
    for i in range(draw(st.integers(1, 6))):
        prefix = draw(_names)
        count = draw(st.integers(1, 5))
        leaves[f"leaf{i}"] = [f"{prefix}{i}x{n:02d}" for n in range(count)]
    uppers: dict[str, list[str]] = {}
    level = list(leaves)
    depth = 0
    while len(level) > 1 and depth < 3:
        groups = draw(st.integers(1, len(level)))
        nxt = []
        for g in range(groups):
            kids = level[g::groups]
            name = f"sw{depth}x{g}"
            uppers[name] = kids
            nxt.append(name)
        level, depth = nxt, depth + 1
    return leaves, uppers


@given(trees())
@settings(max_examples=150, deadline=None)
def test_render_parse_round_trip(tree: tuple[dict[str, list[str]], dict[str, list[str]]]) -> None:
    leaves, uppers = tree
    text = "".join(f"SwitchName={n} Nodes={','.join(v)}\n" for n, v in leaves.items())
    text += "".join(f"SwitchName={n} Switches={','.join(v)}\n" for n, v in uppers.items())
    topo = parse_topology_conf(text)
    again = parse_topology_conf(render_topology_conf(topo))
    assert {n: s.nodes for n, s in again.switches.items()} == {n: s.nodes for n, s in topo.switches.items()}
    assert {n: set(s.children) for n, s in again.switches.items()} == {
        n: set(s.children) for n, s in topo.switches.items()
    }
    assert not [f for f in again.findings if f.status is Status.FAIL]
    everything = [n for v in leaves.values() for n in v]
    where = place(topo, everything)
    assert where.min_leaves <= len(where.leaves_spanned) == len(leaves)


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_parsers_take_garbage_with_a_named_error(text: str) -> None:
    for parse in (
        lambda t: parse_topology_conf(t, "g.conf"),
        lambda t: parse_topology_yaml(t, "g.yaml"),
        lambda t: parse_ibnetdiscover(t, "g.dump"),
        lambda t: parse_slurm_conf(t, "slurm.conf", lambda p: (p, "")),
        lambda t: parse_node_map(t, "m"),
    ):
        try:
            parse(text)
        except TopologyError as exc:
            assert str(exc).startswith(("g.", "slurm.conf", "m"))


@given(st.lists(st.sampled_from(["SwitchName=", "Switches=", "Nodes=", "s[0-2]", "n[1-3]", " ", "\n", "#", "\\",
                                 "LinkSpeed=9", "BlockName=", "BlockSizes=2,4", "a", ","]), max_size=40))  # fmt: skip
@settings(max_examples=300, deadline=None)
def test_topology_conf_fuzz_with_real_tokens(tokens: list[str]) -> None:
    try:
        topo = parse_topology_conf("".join(tokens), "f.conf")
    except TopologyError as exc:
        assert str(exc).startswith("f.conf")
        return
    for node in topo.nodes[:5]:
        place(topo, [node])


# -- the CLI ---------------------------------------------------------------------------------------------


def test_cli_json_has_the_documented_keys() -> None:
    proc = cli(
        "topology", "--conf", TOPO / "unsw-rocks-abacus-topology.conf.txt", "--nodes", "abacusc-0-[0-1],abacusc-1-0",
        "--format", "json",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    assert {k: out[k] for k in ("switches", "levels", "leaves_spanned", "min_leaves", "common_switch", "status")} == {
        "switches": 5,
        "levels": 2,
        "leaves_spanned": ["abacusc-0", "abacusc-1"],
        "min_leaves": 1,
        "common_switch": "abacusc-net",
        "status": "warn",
    }
    assert out["findings"][0]["status"] == "warn" and "3 nodes span 2 leaf switches" in out["findings"][0]["message"]


def test_cli_table_draws_the_tree_and_marks_the_job() -> None:
    proc = cli("topology", "--conf", TOPO / "unsw-rocks-abacus-topology.conf.txt", "--nodes", "abacusc-0-[0-3]")
    assert proc.returncode == 0, proc.stderr
    assert "└── abacusc-net  (level 1)" in proc.stdout
    assert "abacusc-0  abacusc-0-[0-3] (4)  <- 4 of the nodes" in proc.stdout
    assert "status: ok - 4 nodes under 1 leaf switch (abacusc-0), as few as possible" in proc.stdout


def test_cli_fails_on_a_file_slurmctld_refuses_and_on_disconnected_nodes() -> None:
    proc = cli("topology", "--conf", X5_CONF)
    assert proc.returncode == 2 and "Switch configuration is not a tree" in proc.stdout
    proc = cli(
        "topology", "--conf", TOPO / "schedmd-testsuite-testcase6-disconnected-topology.conf.txt", "--nodes",
        "node[8-9,33]", "-f", "json",
    )  # fmt: skip
    out = json.loads(proc.stdout)
    assert proc.returncode == 2 and out["status"] == "fail" and out["common_switch"] is None


def test_cli_job_nodes_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = TOPO / "schedmd-doc-topology.shtml-example1.conf.txt"
    monkeypatch.setenv("SLURM_JOB_NODELIST", "tux[0,2]")
    out = json.loads(cli("topology", "--conf", conf, "--job-nodes-from-env", "-f", "json").stdout)
    assert (out["common_switch"], out["leaves_spanned"], out["min_leaves"]) == ("s4", ["s0", "s1"], 1)
    monkeypatch.delenv("SLURM_JOB_NODELIST")
    proc = cli("topology", "--conf", conf, "--job-nodes-from-env")
    assert proc.returncode == 64 and "SLURM_JOB_NODELIST is not set" in proc.stderr


def test_cli_slurm_conf_cross_check(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_text("TopologyPlugin=topology/tree\nNodeName=circe-n[001-080]\n")
    proc = cli(
        "topology", "--conf", TOPO / "tonystarkiss-slurm-superpod-topology.conf.txt", "--slurm-conf",
        tmp_path / "slurm.conf", "-f", "json",
    )  # fmt: skip
    out = json.loads(proc.stdout)
    messages = [f["message"] for f in out["findings"]]
    assert proc.returncode == 2
    assert any(m.startswith("circe-n[019-020,059] (3 nodes) are under no leaf switch") for m in messages)
    assert any(m.startswith("switch s0 lists n[019-020], which no NodeName line defines") for m in messages)


def test_cli_generate_and_compare(tmp_path: Path) -> None:
    node_map = tmp_path / "X5.map"
    node_map.write_text(X5_MAP)
    proc = cli("topology", "--ibnetdiscover", X5_DUMP, "--node-map", node_map, "--generate")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# topology.conf generated by clustercheck")
    (tmp_path / "topology.conf").write_text(proc.stdout)
    again = cli("topology", "--conf", tmp_path / "topology.conf", "--nodes", "sl390lin[101-124]")
    assert again.returncode == 0 and "24 nodes under 1 leaf switch (S-0008f105002036b4)" in again.stdout
    proc = cli("topology", "--ibnetdiscover", X5_DUMP, "--node-map", node_map, "--compare", "--conf", X5_CONF)
    assert proc.returncode == 2 and "Switch configuration is not a tree" in proc.stdout
    assert "has no link" not in proc.stdout and "wrong" not in proc.stdout


def test_cli_shows_the_fabric_tree_of_a_dump() -> None:
    proc = cli("topology", "--ibnetdiscover", SUPERBENCH, "--nodes", "RMD[701091901003,701091906037]")
    assert proc.returncode == 1, proc.stderr  # the dump names a node it does not describe
    assert "└── S-0ff08c43213b3f30  (level 2)  <- lowest common switch" in proc.stdout
    assert "S-0ff08c43215bae48  RMD[701091901003,701091901019] (2)  <- 1 of the nodes" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "a", "--job-nodes-from-env"], "give --nodes or --job-nodes-from-env, not both"),
        (["--generate"], "--generate, --compare, --oversubscription and --node-map work on an --ibnetdiscover dump"),
        ([], "give --conf topology.conf"),
        (["--conf", "/nonexistent/topology.conf"], "/nonexistent/topology.conf: no such file"),
        (["--conf", str(TOPO / "unsw-rocks-abacus-topology.conf.txt"), "--nodes", "a[1-"], "--nodes: bad hostlist"),
        (["--conf", str(IB / "psmn-x5-ibnetdiscover-qdr-voltaire-2020.txt")], "psmn-x5-ibnetdiscover-qdr-voltaire"),
        (
            ["--ibnetdiscover", str(TOPO / "unsw-rocks-abacus-topology.conf.txt")],
            "unsw-rocks-abacus-topology.conf.txt:",
        ),
    ],
)
def test_cli_bad_input_exits_64_with_a_message(args: list[str], message: str) -> None:
    proc = cli("topology", *args)
    assert proc.returncode == 64, (proc.returncode, proc.stdout, proc.stderr)
    assert message in proc.stderr and "Traceback" not in proc.stderr


# -- dumps without Ca blocks, and oversubscription (issue 20) ----------------------------------------------

TOPOGRAPH = IB / "topograph-ibnetdiscover-ndr-dgx-31leaf-9spine-sharp.txt"
TOPOGRAPH_BAD = IB / "topograph-ibnetdiscover-gb200-lone-ca-no-links-BAD.txt"
P_EDR = IB / "infiniband-exporter-ibnetdiscover-p-ports-edr-links-only.txt"
P_HDR = IB / "infiniband-exporter-ibnetdiscover-p-ports-hdr-leaf-spine-padded-names.txt"
P_UNQUOTED = IB / "infiniband-exporter-ibnetdiscover-p-ports-qdr-unquoted-name.txt"


def test_p_ports_report_links_from_both_ends() -> None:
    # MANIFEST: hosts only on link lines; CA->SW and SW->CA lines are one cable; unpeered ports are no links
    fabric = parse_ibnetdiscover(P_EDR.read_text(), P_EDR.name)
    leaf = fabric.nodes["S-7cfe9003009ce5b0"]
    assert leaf.description == "ib-i1l1s01" and leaf.kind == "Switch"
    assert sorted((link.port, link.remote, link.speed) for link in leaf.links) == [
        (1, "S-7cfe900300b07320", "4xEDR"),
        (10, "H-7cfe9003003b4bde", "4xEDR"),
        (11, "H-7cfe9003003b4b96", "4xEDR"),
    ]
    assert fabric.nodes["H-7cfe9003003b4bde"].links == [fabric.nodes["H-7cfe9003003b4bde"].links[0]]
    assert fabric.nodes["S-08c0eb0300add20e"].links == []  # 'ib-i7l2s01' port 80 "4x SDR" with no peer
    tree = fabric_topology(fabric)
    assert tree.switches["S-7cfe9003009ce5b0"].nodes == ("o0001", "o0002")
    assert tree.switches["S-506b4b03005c2740"].nodes == ("p0001",)
    assert tree.switches["S-7cfe900300b07320"].children == ("S-7cfe9003009ce5b0",)


def test_p_ports_generate_and_compare_end_to_end(tmp_path: Path) -> None:
    proc = cli("topology", "--ibnetdiscover", P_EDR, "--generate")
    assert proc.returncode == 0, proc.stderr
    assert "SwitchName=S-7cfe9003009ce5b0 Nodes=o[0001-0002]  # ib-i1l1s01" in proc.stdout
    assert "SwitchName=S-506b4b03005c2740 Nodes=p0001" in proc.stdout
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=ib-i1l1s01 Nodes=o0001,p0001\nSwitchName=ib-i4l1s01 Nodes=o0002\n")
    proc = cli("topology", "--ibnetdiscover", P_EDR, "--compare", "--conf", conf)
    assert proc.returncode == 2, proc.stdout
    assert "cables go to S-" in proc.stdout and "p0001" in proc.stdout


def test_p_ports_padded_names_and_aggregation_node() -> None:
    fabric = parse_ibnetdiscover(P_HDR.read_text(), P_HDR.name)
    assert fabric.nodes["S-946dae0300630bf6"].description == "5FB0405-leaf-IB01"  # trimmed
    assert fabric.nodes["S-946dae0300618c83"].description == "5FB0406-spine-IB02"
    tree = fabric_topology(fabric)
    assert tree.nodes == ["worker20"]  # the Aggregation Node is no host
    unquoted = parse_ibnetdiscover(P_UNQUOTED.read_text(), P_UNQUOTED.name)
    assert unquoted.nodes["S-0002c9020040f161"].description == "Infiniscale-IV Mellanox Technologies"


def test_hosts_only_on_switch_port_lines_are_taken_from_the_comments() -> None:
    # The topograph dump with every Ca block cut: hosts appear only on the leaves' port lines.
    lines = TOPOGRAPH.read_text().splitlines()
    kept, skip = [], False
    for line in lines:
        if line.startswith("Ca\t"):
            skip = True
        elif not line.strip():
            skip = False
        if not skip:
            kept.append(line)
    fabric = parse_ibnetdiscover("\n".join(kept) + "\n", "cut")
    assert not fabric.hcas or all(h.line for h in fabric.hcas)
    tree = fabric_topology(fabric)
    assert len(tree.switches) == 40 and "a08-p1-dgx-04-c01" in tree.nodes
    (said,) = [f for f in fabric.findings if "linked to but not described" in f.message]
    assert "taken from the port lines" in said.message
    over = oversubscription(fabric)
    assert (over.leaves[0].hosts, over.leaves[0].uplinks) == (18, 15)


def test_topograph_oversubscription_matches_the_manifest() -> None:
    over = oversubscription(parse_ibnetdiscover(TOPOGRAPH.read_text(), TOPOGRAPH.name))
    assert len(over.leaves) == 31 and over.designed_uplinks == 18
    by_name = {leaf.description.split(";")[1].split(":")[0]: leaf for leaf in over.leaves}
    worst_leaf = over.leaves[0]
    assert worst_leaf.description.startswith("MF0;A09-P1-IBLEAF-02-03")
    assert (worst_leaf.hosts, worst_leaf.uplinks, round(worst_leaf.ratio or 0, 2)) == (18, 15, 1.2)
    assert worst_leaf.host_gbps == 18 * 400 and worst_leaf.uplink_gbps == 15 * 400  # 4xNDR
    assert (by_name["A09-P1-IBLEAF-01-02"].hosts, by_name["A09-P1-IBLEAF-01-02"].uplinks) == (16, 14)
    assert (by_name["B09-P1-IBLEAF-03-07"].hosts, by_name["B09-P1-IBLEAF-03-07"].uplinks) == (17, 15)
    assert "A09-P1-IBLEAF-03-01" not in by_name  # missing from the sweep
    asym = [f.message for f in over.findings if "cabling asymmetry" in f.message]
    assert any("A09-P1-IBLEAF-01-02" in m and "14 live uplinks" in m for m in asym)
    assert len(asym) == 12  # the README states it
    assert all(f.status is Status.WARN for f in over.findings if "cabling asymmetry" in f.message)
    assert over.status is Status.FAIL
    # at 1.25:1 no leaf is over the limit; the asymmetry still warns
    relaxed = oversubscription(parse_ibnetdiscover(TOPOGRAPH.read_text(), TOPOGRAPH.name), 1.25)
    assert relaxed.status is Status.WARN


def test_oversubscription_cli_exit_codes_and_json() -> None:
    proc = cli("topology", "--ibnetdiscover", TOPOGRAPH, "--oversubscription")
    assert proc.returncode == 2, proc.stderr
    assert "1.20:1" in proc.stdout and "A09-P1-IBLEAF-02-03" in proc.stdout
    proc = cli("topology", "--ibnetdiscover", TOPOGRAPH, "--oversubscription", "--max-ratio", "1.25")
    assert proc.returncode == 1, proc.stderr
    out = json.loads(cli("topology", "--ibnetdiscover", TOPOGRAPH, "--oversubscription", "-f", "json").stdout)
    assert out["status"] == "fail" and out["worst"]["ratio"] == 1.2 and len(out["leaves"]) == 31
    assert out["worst"]["hosts"] == 18 and out["worst"]["uplinks"] == 15
    for bad in (["--max-ratio", "0"], ["--max-ratio", "-1"], ["--generate"]):
        proc = cli("topology", "--ibnetdiscover", TOPOGRAPH, "--oversubscription", *bad)
        assert proc.returncode == 64 and "Traceback" not in proc.stderr
    proc = cli("topology", "--oversubscription")
    assert proc.returncode == 64 and "--ibnetdiscover" in proc.stderr


def test_dump_with_no_links_is_an_error_not_an_empty_conf() -> None:
    # MANIFEST: the lone-Ca dump: --generate must say the dump has no links, not write a topology.conf
    proc = cli("topology", "--ibnetdiscover", TOPOGRAPH_BAD, "--generate")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "no links" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli("topology", "--ibnetdiscover", TOPOGRAPH_BAD, "--oversubscription")
    assert proc.returncode == 2 and "no switch with hosts" in proc.stdout


def test_duplicate_guids_and_loops_are_findings() -> None:
    dump = (
        'Switch\t4 "S-01"\t# "leaf1" lid 1\n[1]\t"H-0a"[1]\t# "n1 mlx5_0" lid 3 4xHDR\n'
        '[2]\t"S-02"[1]\t# "leaf2" lid 2 4xHDR\n[3]\t"S-02"[2]\t# "leaf2" lid 2 4xHDR\n\n'
        'Switch\t4 "S-02"\t# "leaf2" lid 2\n[1]\t"S-01"[2]\t# "leaf1" lid 1 4xHDR\n'
        '[2]\t"S-01"[3]\t# "leaf1" lid 1 4xHDR\n[3]\t"H-0b"[1]\t# "n2 mlx5_0" lid 4 4xHDR\n\n'
        'Switch\t4 "S-01"\t# "leaf1 again" lid 9\n[4]\t"S-01"[4]\t# "leaf1" lid 9 4xHDR\n\n'
        'Ca\t1 "H-0a"\t# "n1 mlx5_0"\n[1]\t"S-01"[1]\t# "leaf1" lid 1 4xHDR\n\n'
    )
    fabric = parse_ibnetdiscover(dump, "dup")
    (dup,) = [f for f in fabric.findings if "appears twice" in f.message]
    assert dup.status is Status.FAIL and dup.where == "dup:11" and "first at line 1" in dup.message
    over = oversubscription(fabric)
    assert over.status is Status.FAIL and {(lf.hosts, lf.uplinks) for lf in over.leaves} == {(1, 2)}
    proc_fabric = fabric_topology(fabric)
    assert len(proc_fabric.switches) == 2


_LINE_PIECES = st.sampled_from(
    [
        "CA",
        "SW",
        "RT",
        " ",
        "  ",
        "134",
        "0x7cfe9003003b4bde",
        "0x7cfe9003009ce5b0",
        "4x",
        "EDR",
        "???",
        "-",
        "(",
        ")",
        "'",
        "' - '",
        "o0001 HCA-1",
        "ib-i1l1s01",
        "\t",
        "[1]",
        '"H-7cfe9003003b4bde"',
        '# "x y" lid 1 4xNDR',
        'Switch\t2 "S-01"',
        "\n",
    ]
)


@given(st.lists(_LINE_PIECES, max_size=40), st.text(max_size=30))
@settings(max_examples=300, deadline=None)
def test_garbage_dumps_give_an_error_or_a_fabric_never_a_crash(pieces: list[str], junk: str) -> None:
    text = "".join(pieces) + junk
    try:
        fabric = parse_ibnetdiscover(text, "g")
    except TopologyError as exc:
        assert str(exc).startswith("g")
        return
    over = oversubscription(fabric)
    assert over.status in (Status.OK, Status.WARN, Status.FAIL)
    fabric_topology(fabric)


@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 3), st.sampled_from(["EDR", "HDR", "NDR"])), max_size=8))
@settings(max_examples=100, deadline=None)
def test_p_lines_give_the_ratio_of_their_ports(leaves: list[tuple[int, int, str]]) -> None:
    lines = []
    for i, (hosts, ups, speed) in enumerate(leaves):
        leaf = f"0x{0x100 + i:016x}"
        for h in range(hosts):
            ca = f"0x{0x10000 + i * 16 + h:016x}"
            lines.append(
                f"CA  {9 + h}  1 {ca} 4x {speed} - SW  {i + 1} {h + 1} {leaf} ( 'n{i}x{h} mlx5_0' - 'leaf{i}' )"
            )
        for u in range(ups):
            spine = f"0x{0x900 + u:016x}"
            lines.append(
                f"SW  {i + 1} {30 + u} {leaf} 4x {speed} - SW  {500 + u}  {i + 1} {spine} ( 'leaf{i}' - 'spine{u}' )"
            )
    if not lines:
        return
    over = oversubscription(parse_ibnetdiscover("\n".join(lines) + "\n", "p"))
    got = {lf.description: (lf.hosts, lf.uplinks, lf.ratio) for lf in over.leaves}
    assert got == {f"leaf{i}": (h, u, h / u if u else None) for i, (h, u, _) in enumerate(leaves)}


# -- rdma.oversubscription: the same analysis as a check over a site's dump -----------------------

NDR_DUMP = IB / "topograph-ibnetdiscover-ndr-dgx-31leaf-9spine-sharp.txt"


def _dump_node(tmp_path: Path, dump: Path | None, max_ratio: str = "") -> tuple[Path, Path]:
    """A replayed node holding the dump at /shared/fabric/ibnetdiscover.txt, and a profile naming it."""
    import shutil

    node = tmp_path / "node"
    (node / "files" / "shared" / "fabric").mkdir(parents=True)
    absent = ""
    if dump is None:
        absent = "absent: [/shared/fabric/ibnetdiscover.txt]\n"
    else:
        shutil.copy(dump, node / "files" / "shared" / "fabric" / "ibnetdiscover.txt")
    (node / "fixture.yaml").write_text(
        f"host: login1\nnote: the dump a site keeps on its nodes\nexpect: {{}}\n{absent}"
    )
    profile = tmp_path / "fabric.yaml"
    extra = f", max_ratio: {max_ratio}" if max_ratio else ""
    profile.write_text(f"checks:\n  rdma.oversubscription: {{dump: /shared/fabric/ibnetdiscover.txt{extra}}}\n")
    return node, profile


def _check(node: Path, profile: Path) -> tuple[int, dict[str, Any]]:
    proc = cli("run", "--replay", node, "--profile", profile, "--format", "json")
    assert "Traceback" not in proc.stderr, proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"].values()
    (check,) = host["checks"]
    return proc.returncode, check


def test_oversubscription_check_over_the_real_ndr_dump(tmp_path: Path) -> None:
    code, c = _check(*_dump_node(tmp_path, NDR_DUMP))
    assert (code, c["status"], c["action"]) == (2, "fail", "CHECK_CABLE")
    assert c["summary"] == (
        "12 of 31 leaves above 1:1, worst MF0;A09-P1-IBLEAF-02-03:MQM9701/U1: 18 hosts on 15 uplinks = 1.20:1 "
        "(/shared/fabric/ibnetdiscover.txt:967); 12 of 31 leaves with fewer live uplinks than the 18 most have "
        "(cabling asymmetry), fewest MF0;A09-P1-IBLEAF-01-02:MQM9701/U1: 14 (/shared/fabric/ibnetdiscover.txt:89)"
    )
    data = c["data"]
    assert isinstance(data, dict) and data["designed_uplinks"] == 18 and len(data["leaves"]) == 31
    # the same figures as `clustercheck topology --oversubscription` gives for the dump
    over = oversubscription(parse_ibnetdiscover(NDR_DUMP.read_text(), str(NDR_DUMP)))
    assert [lf.to_json()["ratio"] for lf in over.leaves] == [lf["ratio"] for lf in data["leaves"]]


def test_oversubscription_check_with_a_laxer_ratio_warns_only_of_the_asymmetry(tmp_path: Path) -> None:
    code, c = _check(*_dump_node(tmp_path, NDR_DUMP, "1.25"))
    assert (code, c["status"]) == (1, "warn")
    assert c["summary"].startswith("12 of 31 leaves with fewer live uplinks than the 18 most have (cabling asymmetry)")


def test_oversubscription_check_names_a_leaf_without_uplinks(tmp_path: Path) -> None:
    dump = IB / "infiniband-exporter-ibnetdiscover-p-ports-edr-links-only.txt"
    code, c = _check(*_dump_node(tmp_path, dump, "4"))
    assert (code, c["status"]) == (2, "fail")  # within 4:1, but ib-i4l1s01's host reaches no other leaf
    assert "ib-i4l1s01 (S-506b4b03005c2740): 1 host and no live uplink" in str(c["summary"])


def test_oversubscription_check_cannot_tell_without_a_usable_dump(tmp_path: Path) -> None:
    code, c = _check(*_dump_node(tmp_path, None))
    assert (code, c["status"]) == (3, "error")
    assert "the ibnetdiscover dump /shared/fabric/ibnetdiscover.txt is absent" in str(c["summary"])
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("this is not\na dump\n")
    code, c = _check(*_dump_node(tmp_path / "g", garbage))
    assert (code, c["status"]) == (3, "error") and str(c["summary"]).startswith("cannot tell: ")
    code, c = _check(*_dump_node(tmp_path / "b", IB / "topograph-ibnetdiscover-gb200-lone-ca-no-links-BAD.txt"))
    assert (code, c["status"]) == (2, "fail") and "no switch with hosts in the dump" in str(c["summary"])


def test_oversubscription_check_profile_errors(tmp_path: Path) -> None:
    node, _ = _dump_node(tmp_path, NDR_DUMP)
    profile = tmp_path / "bad.yaml"
    profile.write_text("checks:\n  rdma.oversubscription: {dump: fabric.txt, max_ratio: 0}\n")
    proc = cli("run", "--replay", node, "--profile", profile)
    assert proc.returncode == 64
    assert "dump: 'fabric.txt' is not the absolute path" in proc.stderr and "max_ratio: 0" in proc.stderr
