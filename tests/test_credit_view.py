"""The credit view: weights relative to GRPO, nearest correct peers, methods from YAML, the HTML page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from lightning_rlvr.experiments.credit_lab import view as cv
from tests.conftest import REPO, tiny_fit

METHODS = sorted((REPO / "configs" / "method").glob("*.yaml"))


def test_weights_are_advantages_over_the_grpo_advantage():
    adv = torch.tensor([[2.0, 1.0, 0.0], [-0.5, -1.0, 0.0], [0.3, 0.0, 0.0]])
    grpo = torch.tensor([1.0, -0.5, 0.0])
    w = cv.token_weights(adv, grpo)
    # row 0: / 1; row 1: / -0.5 (a sign flip would show as negative); row 2: A_i = 0, raw advantages kept
    assert torch.equal(w, torch.tensor([[2.0, 1.0, 0.0], [1.0, 2.0, -0.0], [0.3, 0.0, 0.0]]))


def test_nearest_correct_peer_has_the_longest_common_prefix():
    tokens = [[1, 2, 3, 4], [1, 2, 9], [1, 2, 3, 7], [1, 5], [1, 2, 3, 4, 5]]
    rewards = [0.0, 1.0, 1.0, 1.0, 0.0]
    assert cv.first_difference([1, 2, 3, 4], [1, 2, 3, 7]) == 3
    assert cv.nearest_correct_peer(tokens, rewards, 0) == (2, 3)  # row 4 shares more but is wrong
    assert cv.nearest_correct_peer(tokens, rewards, 2) == (1, 2)  # never itself; ties go to the lowest row
    assert cv.nearest_correct_peer([[1], [1]], [0.0, 1.0], 1) is None  # no other correct rollout


@pytest.mark.parametrize("method", METHODS, ids=lambda p: p.stem)
def test_every_method_yaml_builds_its_credit_assigner(method):
    import yaml

    credit = cv.load_credit(method)
    section = yaml.safe_load(method.read_text())["model"]["credit"]
    assert type(credit).__name__ == section["class_path"].rsplit(".", 1)[-1]
    for name, value in (section.get("init_args") or {}).items():
        if isinstance(value, (int, float, bool)) and isinstance(
            getattr(credit, name, None), (int, float, bool)
        ):
            assert getattr(credit, name) == value, name  # the YAML's numbers reached the object


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory) -> Path:
    """A 1-step fit at test scale without the credit lab's longer warm start (conftest's ``tiny_ckpt``):
    these tests read this checkpoint's groups."""
    return tiny_fit(tmp_path_factory.mktemp("credit_view"))


def method(name: str) -> str:
    return str(REPO / "configs" / "method" / f"{name}.yaml")


def test_renders_every_method_on_the_same_rollouts_of_a_tiny_checkpoint(tiny_ckpt, tmp_path):
    names = ("grpo", "sc_grpo", "dr_grpo")
    argv = ["--ckpt", str(tiny_ckpt), "--methods", *map(method, names), "--group-size", "4"]
    page = cv.main(argv + ["--out", str(tmp_path / "v.html")]).read_text()
    assert page.startswith("<!doctype html>")
    sections = re.findall(r"<section id='rollout-(\d+)'>(.*?)</section>", page, flags=re.S)
    assert [int(i) for i, _ in sections] == [0, 1, 2, 3]
    for _, body in sections:
        rows = re.findall(
            r"<tr class='method' data-method='(\w+)'><th>\w+</th><td>(.*?)</td>", body, flags=re.S
        )
        assert [m for m, _ in rows] == list(names)
        counts = {len(re.findall(r'<span class="tok[^"]*" style="background:', spans)) for _, spans in rows}
        assert len(counts) == 1 and counts.pop() > 0  # every method colours the same tokens


def test_weights_and_peers_on_a_group_with_correct_and_wrong_rollouts(tiny_ckpt):
    from lightning_rlvr.module import RLVRModule
    from lightning_rlvr.scoring.scorer import Scorer

    module = RLVRModule.load_from_checkpoint(tiny_ckpt, map_location="cpu")
    torch.manual_seed(0)
    rollout = module.rollout([module.task.problem("test", 0)], 4)
    rollout.rewards = torch.tensor([1.0, 1.0, 0.0, 0.0])  # as a trained policy would get (tiny gets ~0)
    scorer = Scorer(module.model, rollout, module.tokenizer, module.micro_batch_size)
    methods = {n: cv.load_credit(method(n)) for n in ("grpo", "dr_grpo", "sc_grpo")}
    grpo, views = cv.assign_all(methods, rollout, scorer)
    mask = rollout.completion_mask.bool()
    # GRPO: A_i = +-0.5 / std([1, 1, 0, 0]) = +-0.866; every token gets exactly A_i, weight 1
    assert grpo.abs().tolist() == pytest.approx([0.866] * 4, abs=1e-3)
    assert torch.allclose(views[0].weights[mask], torch.ones(int(mask.sum())))
    # Dr. GRPO: A_i = r_i - 0.5 without the std, so its weight is the std itself, sqrt(1/3) = 0.577
    assert torch.allclose(views[1].weights[mask], torch.full((int(mask.sum()),), 0.57735), atol=1e-4)
    # SC-GRPO (2 of 4 correct: its token weighting applies) moves credit between tokens
    assert torch.isfinite(views[2].weights).all()
    assert not torch.allclose(views[2].weights[mask], views[0].weights[mask])
    page = cv.render_html(rollout, module.tokenizer, grpo, views, "t")
    sections = dict(re.findall(r"<section id='rollout-(\d+)'>(.*?)</section>", page, flags=re.S))
    assert "nearest correct peer: rollout 1 " in sections["0"]  # the only other correct one
    assert "nearest correct peer: rollout 0 " in sections["1"]
    assert "reward 0 " in sections["2"] and "nearest correct peer: rollout" in sections["2"]


def test_tokens_are_coloured_by_signed_advantage_on_one_diverging_scale_with_a_legend():
    """A failed rollout's tokens (negative advantage) were solid green: green meant 'same sign as GRPO'."""
    from lightning_rlvr.credit.grpo import GRPOCredit
    from lightning_rlvr.models import build_tiny_tokenizer
    from tests.rollouts import rollout_from_ids

    tok = build_tiny_tokenizer()
    ids = tok(" 7+5+0=12;", add_special_tokens=False)["input_ids"]
    rollout = rollout_from_ids(
        [ids[:2]] * 1,
        [ids, ids[:5], ids[:7]],
        pad=0,
        eos=tok.eos_token_id,
        group_size=3,
        rewards=[1.0, 0.0, 0.0],
    )
    from lightning_rlvr.scoring.scorer import Scorer

    grpo, views = cv.assign_all({"grpo": GRPOCredit()}, rollout, Scorer(None, rollout))
    page = cv.render_html(rollout, tok, grpo, views, "t")
    blue, red = "rgba(33,102,172,", "rgba(178,24,43,"
    rows = re.findall(r"<section id='rollout-(\d)'>(.*?)</section>", page, re.S)
    colours = {
        int(i): re.findall(r'class="tok[^"]*" style="background:(rgba\([\d,]+),', body) for i, body in rows
    }
    assert colours[0] and all(c + "," == blue for c in colours[0])  # the correct rollout: positive
    for i in (1, 2):  # the failed ones: negative advantage, red, whatever GRPO's sign is
        assert colours[i] and all(c + "," == red for c in colours[i])
    assert "signed token advantage" in page and page.count("class='legend'") == 1
    legend = re.search(r"<p class='legend'>(.*?)</p>", page, re.S).group(1)
    assert blue in legend and red in legend and "rgba(33,102,172,0.000)" in legend  # centred at 0: white
    assert cv._color(0.0, 1.0).endswith(",0.000)") and cv._color(-2.0, 1.0) == cv._color(-1.0, 1.0)
