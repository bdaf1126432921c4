"""A loss file and a method file compose in either order, or stop with one error line saying why not."""

from __future__ import annotations

import pytest
import yaml

from lightning_rlvr.cli.compose import check_loss_settings_agree
from lightning_rlvr.core.errors import RLVRError
from tests.conftest import QUICKSTART, REPO

METHODS = sorted((REPO / "configs" / "method").glob("*.yaml"))
LOSSES = sorted((REPO / "configs" / "loss").glob("*.yaml"))


def printed(run_cli, capsys, *configs) -> tuple[int, dict | str]:
    """(exit code, the printed config or the error output) of ``fit --print_config`` on the quickstart."""
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--print_config", configs=(QUICKSTART, *map(str, configs)))
    out = capsys.readouterr()
    code = exit_info.value.code or 0
    return code, (yaml.safe_load(out.out)["model"] if code == 0 else out.err)


@pytest.mark.parametrize("method", METHODS, ids=lambda p: p.stem)
def test_a_method_file_chooses_no_loss_class(method):
    """The loss class is the loss file's (or the default): a method file sets at most loss settings, which
    ``check_loss_settings_agree`` compares with the loss file's."""
    loss = yaml.safe_load(method.read_text())["model"].get("loss") or {}
    assert "class_path" not in loss, f"{method.name} restates the loss class"


# the method files that set loss settings, and two that set none
@pytest.mark.parametrize("method", ["dapo", "dr_grpo", "sc_grpo", "hp_rlvr"])
def test_a_loss_file_and_a_method_file_give_one_result_in_either_order(method, run_cli, capsys):
    method = REPO / "configs" / "method" / f"{method}.yaml"
    for loss in LOSSES:
        first = printed(run_cli, capsys, loss, method)
        second = printed(run_cli, capsys, method, loss)
        assert first[0] == second[0], (loss.name, method.name)
        code, model = first
        if code == 0:
            assert first == second, (
                loss.name,
                method.name,
            )  # the loss file's class, its settings, and the method's credit
            loss_file = yaml.safe_load(loss.read_text())["model"]["loss"]
            assert model["loss"]["class_path"] == loss_file["class_path"]
            assert loss_file["init_args"].items() <= model["loss"]["init_args"].items()
            credit = yaml.safe_load(method.read_text())["model"]["credit"]["class_path"]
            assert model["credit"]["class_path"] == credit
        else:
            for out in (first[1], second[1]):
                lines = [line for line in out.splitlines() if line.strip()]
                assert code == 2 and len(lines) == 1 and "model.loss.init_args." in lines[0], out
                assert str(loss) in lines[0] and str(method) in lines[0]


def test_the_issues_example_trains_gspo_in_either_order(run_cli, capsys):
    """``quickstart + loss/gspo + method/sc_grpo`` once printed PPOClip: the method file restated the loss."""
    gspo, sc_grpo = REPO / "configs/loss/gspo.yaml", REPO / "configs/method/sc_grpo.yaml"
    for order in ((gspo, sc_grpo), (sc_grpo, gspo)):
        code, model = printed(run_cli, capsys, *order)
        assert code == 0 and model["loss"]["class_path"] == "lightning_rlvr.losses.GSPO"
        assert model["credit"]["class_path"] == "lightning_rlvr.credit.sc_grpo.SCGRPOCredit"


@pytest.mark.parametrize(
    "a, b, key",
    [
        (
            "model: {loss: {init_args: {eps_high: 0.28}}}",
            "model: {loss: {init_args: {eps_high: 4.0e-4}}}",
            "eps_high",
        ),
        (
            "model: {loss: {init_args: {loss_agg: constant}}}",
            "model: {loss: {class_path: x.CISPO, init_args: {loss_agg: token_mean}}}",
            "loss_agg",
        ),
        (
            "model: {loss: {init_args: {kl_beta: 0.1, tis_cap: null}}}",
            "model: {loss: {init_args: {tis_cap: 2.0}}}",
            "tis_cap",
        ),
    ],
)
def test_two_files_setting_one_loss_setting_differently_is_one_error_line_in_either_order(
    tmp_path, a, b, key
):
    files = [tmp_path / "a.yaml", tmp_path / "b.yaml"]
    for f, text in zip(files, (a, b)):
        f.write_text(text)
    for order in (files, files[::-1]):
        with pytest.raises(RLVRError) as err:
            check_loss_settings_agree([arg for f in order for arg in ("--config", str(f))])
        message = str(err.value)
        assert "\n" not in message and f"model.loss.init_args.{key}" in message
        assert all(str(f) in message for f in files)


def test_files_that_agree_or_set_different_settings_pass(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("model: {loss: {init_args: {eps_high: 0.28, loss_agg: token_mean}}}")
    b.write_text("model: {loss: {class_path: x.CISPO, init_args: {eps_high: 0.28, eps_low: 1.0}}}")
    check_loss_settings_agree(["--config", str(a), f"--config={b}", "-c", str(a)])
