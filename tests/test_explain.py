"""`shardsim explain`: per operator the chosen signature, the two best alternatives with
their costs, and the configured operator the choice came from."""

import json

from simulator.config.resources import resolve_yaml

EXPECTED_SEED_B = """\
seed (b) dimension-changing operators only, the rest propagated
search ilp on mesh (m0=2, m1=2, m2=2): total cost 1,424 B
  (ilp: exact: an integer program solved by HiGHS)

add_bias (Add), from pool
  chosen  (S(0), B) -> S(0) x (S(2), S(0)) -> S(2) x (S(2), S(0)) -> S(2)  [392 B]
  alt 1   (S(1), B) -> S(1) x (S(2), S(0)) -> S(2) x (S(2), S(0)) -> S(2)  [584 B]
  alt 2   (S(0), B) -> S(0) x (S(2), S(0)) -> S(2) x (S(0), B) -> S(0)  [592 B]

pool (ReduceMean), configured
  chosen  (S(0)) -> S(0) x (S(2)) -> S(1) x (S(2)) -> S(1)  [384 B]

dense (Einsum), configured
  chosen  (S(0), B) -> S(0) x (S(1), S(0)) -> P x (S(1), S(0)) -> P  [160 B]

act (ReLU), from dense
  chosen  (S(0)) -> S(0) x (S(0)) -> S(0) x (S(0)) -> S(0)  [96 B]
  alt 1   (S(0)) -> S(0) x (S(0)) -> S(0) x (S(1)) -> S(1)  [192 B]
  alt 2   (S(0)) -> S(0) x (S(1)) -> S(1) x (S(0)) -> S(0)  [480 B]

head (Einsum), configured
  chosen  (S(0), B) -> S(0) x (S(0), B) -> S(0) x (S(0), B) -> S(0)  [336 B]

ce (SoftmaxCrossEntropy), from head
  chosen  (S(0), S(0)) -> S(0) x (S(0), S(0)) -> S(0) x (S(0), S(0)) -> S(0)  [48 B]

loss (ReduceMean), from head
  chosen  (S(0)) -> P x (S(0)) -> P x (S(0)) -> P  [8 B]
"""


def test_explain_text_is_pinned(invoke_cli):
    """Closed forms behind the figures (fp32, mesh 2 x 2 x 2): act reads its local [2, 12]
    block of d, 96 B, already where dense's out_strategy put it; its first alternative
    reads [4, 6] (96 B) but d reaches it by an all-to-all on m2 of a 96 B block (48 B bus)
    and goes back to head's layout by another (48 B): 192 B. loss reads 2 of ce's 16
    values: 8 B."""
    result = invoke_cli("explain", "seed-b-propagate")
    assert result.exit_code == 0
    assert result.stdout == EXPECTED_SEED_B


def test_explain_json_names_where_each_choice_came_from(invoke_cli):
    result = invoke_cli("explain", "seed-c-propagate", "--json")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    origin = {row["op"]: row["from"] for row in report["ops"]}
    # the data-parallel fc1 reaches back through the whole convolution half, the model
    # parallel fc2 forward to its ReLU, and the configured ops are their own origin
    for op in ("conv1", "relu1", "conv2", "relu2", "residual", "flatten", "fc1_relu"):
        assert origin[op] == "fc1"
    assert origin["fc2_relu"] == "fc2" and origin["fc3"] == "fc3"
    for row in report["ops"]:
        assert len(row["alternatives"]) <= 2
        assert all(row["cost_bytes"] <= alt["cost_bytes"] for alt in row["alternatives"])
        if row["configured"]:
            assert row["alternatives"] == []


def test_explain_on_a_semi_auto_scenario_says_what_it_shows(invoke_cli):
    result = invoke_cli("explain", "seed-b-dimension-changing")
    assert result.exit_code == 0
    assert "note: parallel.mode is semi_auto; showing what parallel.mode=auto would " \
           "choose" in result.stderr


def test_explain_refuses_a_transformer(invoke_cli):
    result = invoke_cli("explain", "tiny-cpu")
    assert result.exit_code == 2
    assert result.stderr == ("error: scenarios/tiny-cpu.yaml: model.type: found "
                             "'transformer'; explain takes an operator graph: graph, mlp or "
                             "resnet\n")


def test_a_bad_key_operator_is_bad_input_for_every_command(invoke_cli, write_file):
    path = resolve_yaml("seed-b-propagate", "scenarios")
    text = path.read_text().replace("strategy: [[2, 1, 4]]}", "strategy: [[3, 1, 4]]}")
    bad = write_file("bad.yaml", text)
    for command in ("run", "verify", "explain"):
        result = invoke_cli(command, str(bad), "--json")
        assert result.exit_code == 2
        assert result.stderr == (f"error: {bad}: model.ops[1].strategy: op 'pool' "
                                 "(ReduceMean): strategy uses 12 devices, which does not "
                                 "divide the 8 devices\n")
