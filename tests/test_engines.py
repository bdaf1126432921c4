"""Rollout engines: the default is today's ``generate`` bit for bit, the fast engine samples the same
tokens under a seed, engines swap by YAML, and every sampler in the project goes through the seam."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from lightning_rlvr import AdditionTask, RLVRModule, TinyPolicy
from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.core.tensors import completion_mask_from_ids, left_pad
from lightning_rlvr.engines.base import Sampling
from lightning_rlvr.engines.fast import FastEngine
from lightning_rlvr.engines.hf import HFGenerateEngine
from lightning_rlvr.engines.sampling import exponential, process_logits
from lightning_rlvr.models import apply_lora, build_tiny_tokenizer
from lightning_rlvr.prompts import PromptFormat
from lightning_rlvr.scoring.scorer import Scorer
from lightning_rlvr.warmstart import WarmStart
from tests.conftest import QUICKSTART, REPO, TINY
from tests.rollouts import sample

POLICY = TinyPolicy(layers=2, hidden=32, heads=4, intermediate=64, max_positions=96)
TASK = AdditionTask(digits=2)
SETTINGS = [  # (temperature, top_p, top_k, do_sample)
    (1.0, 1.0, 0, True),
    (0.7, 1.0, 5, True),
    (1.3, 0.8, 0, True),
    (1.0, 0.9, 7, True),
    (1.0, 1.0, 0, False),
]


def problems(k: int = 5):
    return [TASK.train_problem(i) for i in range(k)]


def legacy_sample(model, tokenizer, probs, G, max_new, temperature, top_p, top_k, do_sample):
    """What ``rollout.sample`` did before engines existed (one ``generate`` call), copied as it was."""
    enc = tokenizer([p.prompt for p in probs], return_tensors="pt", padding=True, add_special_tokens=False)
    ids = enc["input_ids"].repeat_interleave(G, 0)
    mask = enc["attention_mask"].repeat_interleave(G, 0)
    model.eval()
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=do_sample,
        temperature=temperature if do_sample else None,
        top_p=top_p if do_sample else None,
        top_k=top_k if do_sample else None,
        max_new_tokens=max_new,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_cache=True,
        synced_gpus=False,
    )
    comp = out[:, ids.shape[1] :]
    keep = completion_mask_from_ids(comp, tokenizer.eos_token_id)
    return ids, mask, comp.masked_fill(keep == 0, tokenizer.pad_token_id), keep


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("seed", [0, 7])
def test_hf_engine_reproduces_the_old_sampler_bit_for_bit(setting, seed):
    temperature, top_p, top_k, do_sample = setting
    model, tok = POLICY.load()
    torch.manual_seed(seed)
    ids, mask, comp, keep = legacy_sample(model, tok, problems(), 3, 20, *setting)
    after_old = torch.random.get_rng_state()
    torch.manual_seed(seed)
    rollout = sample(
        model, tok, problems(), 3, 20, temperature, top_p, top_k, do_sample, engine=HFGenerateEngine()
    )
    assert torch.equal(rollout.prompt_ids, ids) and torch.equal(rollout.prompt_mask, mask)
    assert torch.equal(rollout.completion_ids, comp) and torch.equal(rollout.completion_mask, keep)
    assert torch.equal(torch.random.get_rng_state(), after_old)  # the training RNG stream is unchanged too
    assert rollout.engine_logp is None  # generate reports no log-probs


def test_module_default_engine_is_fast_for_a_llama_and_samples_as_before():
    """With no engine given a Llama policy gets FastEngine (engines/choose.py): generate's samples."""
    module = RLVRModule(task=TASK, policy=POLICY, max_new_tokens=20, temperature=0.8, validate_at_start=False)
    assert type(module.engine) is FastEngine
    torch.manual_seed(3)
    rollout = module.rollout(problems(), 4)
    torch.manual_seed(3)
    _, _, comp, _ = legacy_sample(module.model, module.tokenizer, problems(), 4, 20, 0.8, 1.0, 0, True)
    assert torch.equal(rollout.completion_ids, comp)


def llama(**overrides) -> LlamaForCausalLM:
    tok = build_tiny_tokenizer()
    config = dict(
        vocab_size=len(tok),
        hidden_size=48,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=96,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    config.update(overrides)
    torch.manual_seed(1)
    model = LlamaForCausalLM(LlamaConfig(**config))
    with torch.no_grad():  # a random model rarely says EOS; make it likely so rows finish early and vary
        model.lm_head.weight[tok.eos_token_id] *= 4 if config["tie_word_embeddings"] else 1
        if not config["tie_word_embeddings"]:
            model.lm_head.weight[tok.eos_token_id] += 0.3 * model.model.norm.weight
    return model


MODELS = {
    "tiny": lambda: POLICY.load()[0],
    "gqa_untied": lambda: llama(num_key_value_heads=2, tie_word_embeddings=False),
    "biased_attention": lambda: llama(attention_bias=True, mlp_bias=True, tie_word_embeddings=False),
    "rope_theta_100": lambda: llama(rope_parameters={"rope_type": "default", "rope_theta": 100.0}),
}


FAST_CASES = [(m, s, 0.75) for m in MODELS for s in SETTINGS] + [
    (m, SETTINGS[0], c) for m in MODELS for c in (0.0, 1.0)
]


@pytest.mark.parametrize("name,setting,compact_at", FAST_CASES)  # every setting; compaction never / each row
def test_fast_engine_samples_what_generate_samples_under_the_same_seed(name, setting, compact_at):
    model, tok = MODELS[name](), build_tiny_tokenizer()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1 and p.abs().sum() == 0:
                p.normal_(0, 0.1)  # zero-initialised biases would hide a wrong bias layout
    engine = FastEngine(compact_at=compact_at)
    torch.manual_seed(11)
    want = sample(model, tok, problems(6), 4, 24, *setting)
    torch.manual_seed(11)
    got = sample(model, tok, problems(6), 4, 24, *setting, engine=engine)
    assert torch.equal(got.completion_ids, want.completion_ids)
    if setting == SETTINGS[0]:  # plain sampling keeps EOS reachable for these models:
        assert want.lengths.min() < want.lengths.max()  # rows finished at different steps (compaction ran)
    # the engine's own log-probs are the trainer's teacher-forced ones (temperature 1), up to float error
    trainer_logp = Scorer(model, got).policy().logp
    keep = got.completion_mask.bool()
    torch.testing.assert_close(got.engine_logp[keep], trainer_logp[keep], atol=2e-5, rtol=1e-5)
    assert (got.engine_logp[~keep] == 0).all()


@pytest.mark.parametrize("n", [1, 3])
def test_fast_engine_continues_arbitrary_token_contexts(n):
    """Contexts of different lengths (not problems): generate's continuations; row i // n is context i's."""
    model, tok = POLICY.load()
    seqs = [[5, 9, 12, 22, 7], [3], [16, 17, 18, 19, 20, 21, 22, 23, 6, 6, 6], [10, 11]]
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), tok.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :], mask[i, width - len(s) :] = torch.tensor(s), 1
    sampling = Sampling(max_new_tokens=16, temperature=1.2)
    torch.manual_seed(5)
    want = HFGenerateEngine().generate(model, ids, mask, n, sampling, tok.pad_token_id, tok.eos_token_id)
    torch.manual_seed(5)
    got = FastEngine().generate(model, ids, mask, n, sampling, tok.pad_token_id, tok.eos_token_id)
    assert got.completion_ids.shape == (len(seqs) * n, want.completion_ids.shape[1])
    assert torch.equal(got.completion_ids, want.completion_ids)


def _next_turn(contexts, generation, eos, reply):
    """Each context + its action (cut after its first EOS, as an episode keeps it) + an observation."""
    out = []
    for context, row in zip(contexts, generation.completion_ids.tolist()):
        action = row[: row.index(eos) + 1] if eos in row else row
        out.append(context + action + reply)
    return out


class PrefillWidth:
    """Records, per ``generate`` call, how many columns its prefill computes (its first ``_layers`` call)
    and the batch sizes of its decode steps (they shrink as finished rows leave the batch)."""

    def __init__(self, monkeypatch):
        self.widths, self.batches, self._prefill = [], [], False
        original = FastEngine._layers

        def spy(w, x, *args):
            if self._prefill:
                self.widths.append(x.shape[1])
                self._prefill = False
            else:
                self.batches[-1].append(x.shape[0])
            return original(w, x, *args)

        monkeypatch.setattr(FastEngine, "_layers", staticmethod(spy))

    def call(self, engine, model, seqs, tok, sampling, n=1):
        self.batches.append([])
        self._prefill = True
        ids, mask = left_pad([torch.tensor(s) for s in seqs], tok.pad_token_id)
        out = engine.generate(model, ids, mask, n, sampling, tok.pad_token_id, tok.eos_token_id)
        return out, ids.shape[1]


FIRST_TURN = [
    [5, 9, 12, 22, 7],
    [3],
    [16, 17, 18, 19, 20, 21, 22, 23, 6, 6, 6],
    [10, 11],
    [7, 7, 8],
    [9],
    [4, 5],
]


# max_new 1: the last token is the only one fed; 3: rows cut at the budget; 12 with compact_at 0.5 or 1: rows
# leave the batch (several at once, or one by one) and their cache is kept from where they left
@pytest.mark.parametrize("max_new,compact_at", [(1, 0.75), (3, 0.75), (12, 0.0), (12, 0.5), (12, 1.0)])
def test_fast_engine_runs_only_the_new_tokens_of_contexts_that_extend_the_last_call(
    monkeypatch, max_new, compact_at
):
    """A multi-turn call after a call whose rows it extends: the same samples as a full prefill (and as
    generate), with only each context's new tokens computed; fresh or diverging contexts still run whole."""
    model, tok = llama(max_position_embeddings=128), build_tiny_tokenizer()
    eos, reply = tok.eos_token_id, [13, 14, 15]
    with torch.no_grad():
        model.lm_head.weight[eos] *= 15  # EOS likelier still: rows finish steps apart, several at once
    first = FIRST_TURN
    sampling = Sampling(max_new_tokens=max_new, temperature=1.2)
    width = PrefillWidth(monkeypatch)
    reuse, full = FastEngine(compact_at=compact_at), FastEngine(compact_at=compact_at, reuse_prefix=False)
    torch.manual_seed(3)
    turn1, _ = width.call(reuse, model, first, tok, sampling)
    if max_new == 12 and compact_at > 0:  # rows really left the batch, at different steps
        assert len(set(width.batches[-1])) > 2
    torch.manual_seed(3)
    assert torch.equal(width.call(full, model, first, tok, sampling)[0].completion_ids, turn1.completion_ids)
    second = _next_turn(first, turn1, eos, reply)
    torch.manual_seed(4)
    turn2, P = width.call(reuse, model, second, tok, sampling)
    # every action ends in a token that was sampled last or is EOS: never fed back, so 1 + |reply| new tokens
    assert width.widths[-1] == 1 + len(reply) < P
    torch.manual_seed(4)
    want, _ = width.call(full, model, second, tok, sampling)
    assert width.widths[-1] == P  # without reuse the whole context runs
    assert torch.equal(turn2.completion_ids, want.completion_ids)
    torch.testing.assert_close(turn2.logp, want.logp, atol=1e-5, rtol=1e-5)
    torch.manual_seed(4)
    assert torch.equal(
        width.call(HFGenerateEngine(), model, second, tok, sampling)[0].completion_ids, turn2.completion_ids
    )
    # a third turn mixing extending contexts, a fresh one and one that leaves its action at its first token
    third = _next_turn(second, turn2, eos, reply)
    third[1] = [4, 4]  # fresh: runs whole (shorter than the others' new tokens)
    third[2] = second[2] + [8] + reply  # reuses its context (and the action's first token if it is 8)
    torch.manual_seed(5)
    turn3, _ = width.call(reuse, model, third, tok, sampling)
    torch.manual_seed(5)
    want3, _ = width.call(full, model, third, tok, sampling)
    assert torch.equal(turn3.completion_ids, want3.completion_ids)
    assert width.widths[-2] == 1 + len(reply) < width.widths[-1]
    assert len(third[2]) > 1 + len(reply)  # so row 2 did not run whole


def test_a_context_with_a_gap_in_its_mask_runs_whole_next_to_reused_ones(monkeypatch):
    """Reuse assumes a left-padded context; one whose mask has a hole (any other layout) runs from its
    first real token, and the call still samples what a full prefill samples."""
    model, tok = POLICY.load()
    sampling = Sampling(max_new_tokens=4, temperature=1.0)
    width, reuse, full = PrefillWidth(monkeypatch), FastEngine(), FastEngine(reuse_prefix=False)
    first = [[5, 9, 12], [3, 7, 8, 9, 10, 11]]
    out, _ = width.call(reuse, model, first, tok, sampling)
    second = _next_turn(first, out, tok.eos_token_id, [13])
    ids, mask = left_pad([torch.tensor(s) for s in second + [[6, 6, 6, 6, 6]]], tok.pad_token_id)
    P = ids.shape[1]
    mask[-1, P - 3] = 0  # a hole two tokens before the end of the last context
    got, want = [], []
    for engine, into in ((reuse, got), (full, want)):
        torch.manual_seed(8)
        into.append(engine.generate(model, ids, mask, 1, sampling, tok.pad_token_id, tok.eos_token_id))
    assert torch.equal(got[0].completion_ids, want[0].completion_ids)
    torch.testing.assert_close(got[0].logp, want[0].logp, atol=1e-5, rtol=1e-5)


def test_fast_engine_reuses_nothing_once_the_weights_change(monkeypatch):
    """A weight changed in place without ``sync_weights`` (a warm-start step) or with it: full prefill."""
    model, tok = POLICY.load()
    sampling = Sampling(max_new_tokens=4, temperature=1.0)
    width, engine = PrefillWidth(monkeypatch), FastEngine()
    first = [[5, 9, 12], [3, 7]]
    out, _ = width.call(engine, model, first, tok, sampling)
    second = _next_turn(first, out, tok.eos_token_id, [13])
    out2, P = width.call(engine, model, second, tok, sampling)
    assert width.widths[-1] < P  # reused
    third = _next_turn(second, out2, tok.eos_token_id, [13])
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(1.001)
    out3, P = width.call(engine, model, third, tok, sampling)
    assert width.widths[-1] == P
    engine.sync_weights(model)  # an optimiser step: the kept cache is dropped
    width.call(engine, model, _next_turn(third, out3, tok.eos_token_id, [13]), tok, sampling)
    assert width.widths[-1] == max(map(len, _next_turn(third, out3, tok.eos_token_id, [13])))


def test_fast_engine_merges_lora_adapters():
    model, tok = POLICY.load()
    lora = apply_lora(model, {"r": 4, "lora_alpha": 8, "init_lora_weights": False})
    torch.manual_seed(2)
    want = sample(lora, tok, problems(), 3, 16, do_sample=False)
    got = sample(lora, tok, problems(), 3, 16, do_sample=False, engine=FastEngine())
    assert torch.equal(got.completion_ids, want.completion_ids)
    with lora.disable_adapter():  # adapters switched off: the base model's samples, from both engines
        base = sample(lora, tok, problems(), 3, 16, do_sample=False, engine=FastEngine())
        assert torch.equal(
            base.completion_ids, sample(lora, tok, problems(), 3, 16, do_sample=False).completion_ids
        )
    assert not torch.equal(base.completion_ids, got.completion_ids)  # the adapters were really merged


def test_fast_engine_reads_the_live_weights_after_an_update():
    model, tok = POLICY.load()
    engine = FastEngine()
    before = sample(model, tok, problems(), 2, 12, do_sample=False, engine=engine)
    torch.manual_seed(0)
    with torch.no_grad():  # an "update": every weight moves
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    engine.sync_weights(model)
    after = sample(model, tok, problems(), 2, 12, do_sample=False, engine=engine)
    assert not torch.equal(after.completion_ids, before.completion_ids)
    assert torch.equal(
        after.completion_ids, sample(model, tok, problems(), 2, 12, do_sample=False).completion_ids
    )


def test_process_logits_matches_hand_computed_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.1], [0.1, 0.2, 0.3, 0.4]]))
    top_k = process_logits(logits, Sampling(8, top_k=2))
    assert torch.isinf(top_k).tolist() == [[False, False, True, True], [True, True, False, False]]
    top_p = process_logits(logits, Sampling(8, top_p=0.7))  # keep the smallest set with mass >= 0.7
    assert torch.isinf(top_p).tolist() == [[False, False, True, True], [True, True, False, False]]
    hot = process_logits(logits, Sampling(8, temperature=2.0))
    torch.testing.assert_close(hot, logits / 2)


def test_fast_engine_refuses_other_architectures_with_one_clear_error():
    tok = build_tiny_tokenizer()
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=64))
    with pytest.raises(RLVRError, match="FastEngine supports Llama-style.*HFGenerateEngine"):
        sample(gpt2, tok, problems(2), 2, 8, engine=FastEngine())
    with pytest.raises(RLVRError, match="compact_at"):
        FastEngine(compact_at=1.5)


def test_vllm_engine_config_parses_without_vllm_and_fails_clearly_on_cpu():
    from lightning_rlvr.engines.vllm import VLLMEngine

    engine = VLLMEngine(gpu_memory_utilization=0.2)  # imports nothing from vllm
    if torch.cuda.is_available():
        pytest.skip("CPU-only behaviour; tests/test_engines_gpu.py covers vLLM on a GPU")
    model, tok = POLICY.load()
    with pytest.raises(RLVRError, match="needs a CUDA GPU"):
        sample(model, tok, problems(2), 2, 8, engine=engine)


def test_engine_swaps_by_yaml_and_a_fit_samples_through_it(run_cli):
    fast = str(REPO / "configs" / "engine" / "fast.yaml")
    cli = run_cli("fit", configs=(QUICKSTART, TINY, fast))  # warm start, RL steps and validation
    assert type(cli.model.engine) is FastEngine and cli.model.engine.compact_at == 0.75
    assert cli.model.rl_step == 2 and "val/pass@1" in cli.trainer.callback_metrics
    hf = str(REPO / "configs" / "engine" / "hf.yaml")
    generate = run_cli("fit", "--trainer.max_steps", "0", configs=(QUICKSTART, TINY, hf))
    assert type(generate.model.engine) is HFGenerateEngine


class CountingEngine(HFGenerateEngine):
    def __init__(self) -> None:
        self.syncs = 0
        self.calls: list[int] = []

    def generate(self, model, context_ids, context_mask, n, sampling, pad_id, eos_id):
        self.calls.append(n)
        return super().generate(model, context_ids, context_mask, n, sampling, pad_id, eos_id)

    def sync_weights(self, model) -> None:
        self.syncs += 1


def test_training_evaluation_and_warm_start_all_sample_through_the_engine(tmp_path):
    from lightning.pytorch import Trainer

    from lightning_rlvr.data import RLVRDataModule

    engine = CountingEngine()
    warm = WarmStart(max_steps=2, eval_every=1, eval_prompts=4, batch_size=4, max_new_tokens=8, cache=False)
    module = RLVRModule(
        task=AdditionTask(digits=1),
        policy=TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64),
        engine=engine,
        warm_start=warm,
        group_size=3,
        eval_samples=2,
        max_new_tokens=8,
        minibatches=2,
        validate_at_start=True,
    )
    Trainer(
        max_steps=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        limit_val_batches=1,
        val_check_interval=2,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,  # its per-prompt results land there, not in the working directory
    ).fit(module, RLVRDataModule(batch_size=2, val_size=2, eval_batch_size=2))
    # warm start: 1 check before training + 1 per step (n = 1); validation at start and at step 2 (n = 2);
    # two RL steps (n = G = 3; Lightning's max_steps counts optimiser steps: 2 per RL step here)
    assert engine.calls == [1, 1, 1, 2, 3, 3, 2]
    assert (
        engine.syncs == 2 + 2 * 2
    )  # after every optimiser step: 2 warm-start steps, 2 RL steps x 2 minibatches


def test_warm_start_trains_on_the_prompts_as_rl_formats_them():
    fmt = PromptFormat(template="Q 1+1= 2;{prompt}")
    model, tok = POLICY.load()
    render = lambda text: fmt.render(tok, text)  # noqa: E731
    warm = WarmStart(batch_size=3)
    ids, mask, labels = warm._batch(tok, TASK, 0, render)
    for row in range(3):
        p = TASK.train_problem(row)
        prompt = tok(render(p.prompt), add_special_tokens=False)["input_ids"]
        assert ids[row, : len(prompt)].tolist() == prompt  # the formatted prompt, not the bare one
        assert (labels[row, : len(prompt)] == -100).all() and labels[row, len(prompt)] != -100
    plain_ids, _, _ = warm._batch(tok, TASK, 0)
    assert tok.decode(plain_ids[0][plain_ids[0] != tok.pad_token_id]).startswith(TASK.train_problem(0).prompt)
    # the cache key: defaults unchanged (old caches stay valid), a format or another engine changes it
    base = warm.key(POLICY, TASK)
    assert warm.key(POLICY, TASK, HFGenerateEngine(), None) == base
    assert len({base, warm.key(POLICY, TASK, None, render), warm.key(POLICY, TASK, FastEngine())}) == 3


def test_fast_engine_under_fsdp2_gathers_the_shards_and_trains(tmp_path):
    """Two ranks (gloo, CPU): each rank's FastEngine gathers the FSDP2 shards, then decodes on its own."""
    from tests.test_distributed import _run, _torchrun

    ckpts = tmp_path / "ckpt"
    fit = [
        "-m",
        "lightning_rlvr.cli",
        "fit",
        "--config",
        QUICKSTART,
        "--config",
        TINY,
        "--config",
        str(REPO / "configs/strategy/fsdp2.yaml"),
        "--config",
        str(REPO / "configs/engine/fast.yaml"),
        "--trainer.logger.init_args.save_dir",
        str(tmp_path / "runs"),
        "--checkpoint.dirpath",
        str(ckpts),
    ]
    _run(_torchrun(2) + fit, tmp_path)
    state = torch.load(ckpts / "last.ckpt", weights_only=True)
    assert state["global_step"] == 2 and state["rlvr"]["rl_step"] == 2


@pytest.mark.parametrize("shape", [(1,), (7, 13), (64, 4099)])
def test_fast_exponential_draws_the_same_numbers_as_exponential_and_leaves_the_rng_where_it_would(shape):
    torch.manual_seed(3)
    want, after = torch.empty(shape).exponential_(1), torch.rand(4)
    torch.manual_seed(3)
    got, got_after = exponential(shape, torch.device("cpu")), torch.rand(4)
    assert torch.equal(want, got) and got.dtype == torch.float32
    assert torch.equal(after, got_after)  # the stream continues where exponential_ would leave it
