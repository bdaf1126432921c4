"""``FastEngine``: a lean decode loop for small Llama-style models on CPU.

At the quickstart's scale (0.5M parameters, 128 rows) one decode step is ~134
MFLOP, which a single core does in ~1 ms, but Hugging Face ``generate`` spends
~5 ms on it: the time goes to per-op overhead (logits processors, cache
bookkeeping, mask construction, dozens of small kernels per layer), not to
arithmetic. This engine runs the same model with fewer, larger ops per token and
less work:

* **fused weights**: one ``[q; k; v]`` matmul and one ``[gate; up]`` matmul per
  layer, built from the live weights at each call (LoRA deltas merged in,
  FSDP shards gathered), so ``sync_weights`` has nothing to do;
* **rotary embedding as one complex multiply**: the q/k weight rows of each head
  are permuted so that the pairs Llama rotates together are adjacent; attention
  scores are unchanged by a permutation applied to both q and k, so nothing is
  undone afterwards;
* **a preallocated KV cache** written in place, and a preallocated key mask of
  fixed width that only has one column switched on per step;
* **shared prompts prefilled once**: the B distinct contexts are run, then their
  cache is repeated for the n samples of each;
* **finished rows leave the batch**: once the rows still generating fall to
  ``compact_at`` of the current batch, the batch is compacted (cache rows
  gathered), so rows that hit EOS stop costing compute;
* **a context that extends the previous call's rows is not prefilled again**
  (``reuse_prefix``): a multi-turn episode's next context is its last context,
  the action just sampled and the environment's reply, so the KV cache of the
  previous call (kept for one call, and only while the weights are unchanged)
  covers all of it but the reply, and only the new tokens run. A key's rotation
  depends only on its position in the sequence, so the reused cache is the one a
  full prefill would compute, up to float rounding (``kv_reuse.py``). Contexts that
  extend nothing (single-turn prompts) prefill exactly as without it.

Samples. Sampling follows ``generate``'s order (temperature, top-k, top-p,
softmax) and draws with the same random numbers: ``torch.multinomial`` with one
sample is ``argmax(p / E)`` with ``E ~ Exp(1)`` drawn for the whole ``[N, V]``
batch, and this engine draws that same ``[N, V]`` block every step, even after
compaction (``match_hf_rng``). So under the same seed it samples the same tokens
as ``HFGenerateEngine`` except where float rounding (fused matmuls, a different
norm kernel) flips a near-tie between two tokens; the tests check equality on the
tiny model. ``match_hf_rng=False`` draws only for live rows (cheaper for large
vocabularies; different, equally distributed samples). With ``keys`` (keyed sampling) each row
draws from its own stream (``core.rng.RowStreams``), one draw a live row a step as
``HFGenerateEngine`` does, so the two engines sample the same tokens for a row whatever the batch
and its compaction.

Log-probs. The engine reports ``log softmax(logits)[token]`` of each sampled
token at temperature 1 (``Generation.logp``), the quantity the trainer computes
from its own forward, so the two differ only by numerics.

Supported: ``model_type == "llama"`` with SiLU MLPs (``TinyPolicy`` and Llama
checkpoints), optionally wrapped in ``peft`` LoRA or sharded by FSDP2. Anything
else raises one ``RLVRError`` naming ``HFGenerateEngine`` as the alternative.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..core import stop
from ..core.errors import RLVRError
from ..core.rng import RowStreams
from . import kv_reuse
from .base import Generation, RolloutEngine, Sampling
from .sampling import exponential, process_logits


def _full(t: Tensor | None) -> Tensor | None:
    """A parameter as a plain local tensor (FSDP2 DTensor shards are gathered)."""
    if t is None:
        return None
    t = t.detach()
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _linear(mod) -> tuple[Tensor, Tensor | None]:
    """Effective (weight, bias) of a Linear, with active LoRA adapters merged in."""
    if hasattr(mod, "base_layer") and hasattr(mod, "lora_A"):  # a peft LoRA layer
        weight = _full(mod.base_layer.weight)
        if not mod.merged and not mod.disable_adapters:
            for name in mod.active_adapters:
                if name in mod.lora_A:
                    weight = weight + _full(mod.get_delta_weight(name))
        return weight, _full(mod.base_layer.bias)
    return _full(mod.weight), _full(getattr(mod, "bias", None))


@dataclass
class _Layer:
    ln1: Tensor  # [d]
    wqkv: Tensor  # [(H + 2 Hkv) D, d], q and k rows permuted for the complex rotary
    bqkv: Tensor | None
    wo: Tensor  # [d, H D]
    bo: Tensor | None
    ln2: Tensor  # [d]
    wgu: Tensor  # [2 I, d]
    bgu: Tensor | None
    wd: Tensor  # [d, I]
    bd: Tensor | None


@dataclass
class _Weights:
    embed: Tensor  # [V, d]
    layers: list[_Layer]
    norm: Tensor  # [d]
    head: Tensor  # [V, d]
    head_b: Tensor | None
    eps: float
    heads: int
    kv_heads: int
    head_dim: int
    rotary: object  # the model's rotary-embedding module (cos/sin for any position)


def _weight_list(w: _Weights) -> list[Tensor]:
    out = [w.embed, w.norm, w.head, *(t for t in [w.head_b] if t is not None)]
    for layer in w.layers:
        out += [t for t in vars(layer).values() if t is not None]
    return out


def _cat_bias(biases: list[Tensor | None], sizes: list[int], like: Tensor) -> Tensor | None:
    if all(b is None for b in biases):
        return None
    return torch.cat([b if b is not None else like.new_zeros(n) for b, n in zip(biases, sizes)])


def llama_weights(model) -> _Weights:
    """The fused inference weights of a Llama-style causal LM (see the module docstring)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft wrapper
    cfg = base.config
    model_type = getattr(cfg, "model_type", None)
    if model_type != "llama" or getattr(cfg, "hidden_act", "silu") != "silu":
        raise RLVRError(
            f"FastEngine supports Llama-style models (model_type 'llama', SiLU MLP), not {model_type!r}; "
            "use model.engine: lightning_rlvr.engines.hf.HFGenerateEngine for this policy"
        )
    H, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads or cfg.num_attention_heads
    D = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    half = torch.arange(D // 2)
    perm = torch.stack([half, half + D // 2], -1).flatten()  # [D]: (x_i, x_{i + D/2}) side by side

    def rows(w: Tensor | None, heads: int) -> Tensor | None:  # permute within each head
        if w is None:
            return None
        return w.view(heads, D, *w.shape[1:])[:, perm].reshape(w.shape)

    layers = []
    for block in base.model.layers:
        att, mlp = block.self_attn, block.mlp
        (wq, bq), (wk, bk), (wv, bv) = (_linear(m) for m in (att.q_proj, att.k_proj, att.v_proj))
        wo, bo = _linear(att.o_proj)
        (wg, bg), (wu, bu), (wd, bd) = (_linear(m) for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
        sizes = [wq.shape[0], wk.shape[0], wv.shape[0]]
        layers.append(
            _Layer(
                ln1=_full(block.input_layernorm.weight),
                wqkv=torch.cat([rows(wq, H), rows(wk, Hkv), wv]),
                bqkv=_cat_bias([rows(bq, H), rows(bk, Hkv), bv], sizes, wq),
                wo=wo,
                bo=bo,
                ln2=_full(block.post_attention_layernorm.weight),
                wgu=torch.cat([wg, wu]),
                bgu=_cat_bias([bg, bu], [wg.shape[0], wu.shape[0]], wg),
                wd=wd,
                bd=bd,
            )
        )
    head, head_b = _linear(base.lm_head)
    return _Weights(
        embed=_full(base.model.embed_tokens.weight),
        layers=layers,
        norm=_full(base.model.norm.weight),
        head=head,
        head_b=head_b,
        eps=cfg.rms_norm_eps,
        heads=H,
        kv_heads=Hkv,
        head_dim=D,
        rotary=base.model.rotary_emb,
    )


def rotary_table(w: _Weights, length: int, device: torch.device) -> Tensor:
    """[length, D/2] complex rotations for positions 0..length-1, from the model's own rotary module."""
    pos = torch.arange(length, device=device)[None]  # [1, L]
    cos, sin = w.rotary(w.embed.new_zeros(1, length, w.head_dim).float(), pos)  # [1, L, D] each
    half = w.head_dim // 2
    return torch.complex(cos[0, :, :half].float(), sin[0, :, :half].float())


class FastEngine(RolloutEngine):
    """A fused, compacting decode loop for Llama-style models (see the module docstring).

    Args:
        compact_at: compact the batch when the rows still generating fall to this fraction of it
            (1.0 compacts at every finished row, 0.0 never).
        match_hf_rng: draw the random numbers for the full batch every step, as ``generate`` does,
            so samples match ``HFGenerateEngine`` under the same seed.
        reuse_prefix: keep each call's KV cache for the next call, whose contexts that extend a row
            of it (the next turn of an episode) run only their new tokens.
    """

    supports_keys = True

    def __init__(
        self, compact_at: float = 0.75, match_hf_rng: bool = True, reuse_prefix: bool = True
    ) -> None:
        if not 0.0 <= compact_at <= 1.0:
            raise RLVRError(f"FastEngine compact_at must be in [0, 1], not {compact_at}")
        self.compact_at = compact_at
        self.match_hf_rng = match_hf_rng
        self.reuse_prefix = reuse_prefix
        self._kept: kv_reuse.KeptCache | None = None

    def sync_weights(self, model) -> None:
        self._kept = None  # the weights changed: no cache of the old ones is reused

    @torch.no_grad()
    def generate(
        self,
        model,
        context_ids: Tensor,
        context_mask: Tensor,
        n: int,
        sampling: Sampling,
        pad_id: int,
        eos_id: int,
        keys: list[int] | None = None,
    ) -> Generation:
        w = llama_weights(model)
        device = context_ids.device
        streams = RowStreams(keys, device) if keys is not None and sampling.do_sample else None  # keyed rows
        B, P = context_ids.shape
        N, T = B * n, sampling.max_new_tokens
        if T < 1:
            raise RLVRError(f"FastEngine needs max_new_tokens >= 1, not {T}")
        Hkv, D = w.kv_heads, w.head_dim
        rot = rotary_table(w, P + T, device)  # [P + T, D/2]

        stop.check("while generating tokens")  # and before every token below
        # prefill the B distinct contexts, then repeat their cache for the n samples of each
        # additive key mask of fixed width S = P + T, one row per (row, kv head): 0 where a key is visible
        key_mask = torch.full((B, Hkv, 1, P + T), float("-inf"), dtype=w.embed.dtype, device=device)
        key_mask[..., :P].masked_fill_(context_mask.bool()[:, None, None], 0.0)
        pos = (context_mask.cumsum(-1) - 1).clamp(min=0)  # [B, P] as generate numbers them
        cache = [(w.embed.new_zeros(B, Hkv, P + T, D), w.embed.new_zeros(B, Hkv, P + T, D)) for _ in w.layers]
        weights = _weight_list(w)
        # the last `run` columns are computed; the cache of earlier columns comes from the last call
        kept, self._kept = self._kept, None
        run = kv_reuse.reuse(kept, weights, context_ids, context_mask, cache)
        if run == 1:  # one new token a row: the decode step's attention over the fixed-width cache
            mask = key_mask
        else:
            query = torch.arange(P - run, P, device=device)[:, None]  # [run, 1] the columns computed
            column = torch.arange(P, device=device)[None]  # [1, P]
            mask = (column <= query) & (context_mask.bool()[:, None, :] | (column == query))
            mask = mask[:, None]  # [B, 1, run, P] causal over real tokens; a pad column sees itself
        x = self._layers(w, w.embed[context_ids[:, P - run :]], rot[pos[:, P - run :]], cache, P - run, mask)
        logits = self._head(w, x[:, -1]).repeat_interleave(n, 0)  # [N, V]
        cache = [(k.repeat_interleave(n, 0), v.repeat_interleave(n, 0)) for k, v in cache]
        key_mask = key_mask.repeat_interleave(n, 0)  # [N, Hkv, 1, P + T]
        home: list[tuple[list, int]] = [(cache, r) for r in range(N)]  # where row r's cache ends up
        next_pos = (pos[:, -1] + 1).repeat_interleave(n, 0)  # [N]

        out = torch.full((N, T), pad_id, dtype=torch.long, device=device)
        out_logp = torch.zeros(N, T, dtype=torch.float32, device=device)
        rows = torch.arange(N, device=device)  # global row of each live batch row
        alive = torch.ones(N, dtype=torch.bool, device=device)  # [n_live] not yet at EOS
        for t in range(T):
            stop.check("while generating tokens")  # a stop signal ends the run here (core/stop.py)
            token, logp = self._sample(logits, sampling, rows, N, streams)
            out[rows, t] = token.masked_fill(~alive, pad_id)
            out_logp[rows, t] = logp.masked_fill(~alive, 0.0)
            alive &= token != eos_id
            live = int(alive.sum())
            if live == 0 or t == T - 1:
                break
            if live <= self.compact_at * len(rows) and live < len(rows):  # drop finished rows
                if self.reuse_prefix:  # the finished rows' cache, for the next call (only theirs is copied)
                    gone = (~alive).nonzero().squeeze(1)
                    left = [(k[gone], v[gone]) for k, v in cache]
                    for i, j in enumerate(gone.tolist()):
                        home[int(rows[j])] = (left, i)
                keep = alive.nonzero().squeeze(1)
                rows, alive, token, next_pos = rows[keep], alive[keep], token[keep], next_pos[keep]
                key_mask = key_mask[keep]
                cache = [(k[keep], v[keep]) for k, v in cache]
            col = P + t
            key_mask[..., col] = 0.0
            x = self._layers(w, w.embed[token][:, None], rot[next_pos][:, None], cache, col, key_mask)
            logits = self._head(w, x[:, -1])
            next_pos = next_pos + 1
        if self.reuse_prefix:
            for j, r in enumerate(rows.tolist()):
                home[r] = (cache, j)
            done = out[:, : t + 1]
            self._kept = kv_reuse.keep(weights, context_ids, context_mask, n, done, t, eos_id, home)
        return Generation(completion_ids=out[:, : t + 1], logp=out_logp[:, : t + 1])

    def _sample(
        self, logits: Tensor, sampling: Sampling, rows: Tensor, N: int, streams: RowStreams | None = None
    ) -> tuple[Tensor, Tensor]:
        """Next token and its temperature-1 log-prob for each live row: [n], [n]."""
        logits = logits.float()
        if sampling.do_sample:
            probs = process_logits(logits, sampling).softmax(-1)  # [n, V]
            if streams is not None:  # keyed: each live row's own next draw
                noise = streams.exponential(rows.tolist(), probs.shape[-1])
            elif self.match_hf_rng:  # multinomial(probs, 1) == argmax(probs / Exp(1)), drawn for all N rows
                noise = exponential((N, probs.shape[-1]), probs.device)
                noise = noise if len(rows) == N else noise[rows]
            else:
                noise = exponential(probs.shape, probs.device)
            token = (probs / noise).argmax(-1)
        else:
            token = logits.argmax(-1)
        logp = logits.gather(-1, token[:, None]).squeeze(1) - logits.logsumexp(-1)
        return token, logp

    @staticmethod
    def _head(w: _Weights, x: Tensor) -> Tensor:
        return F.linear(F.rms_norm(x, (x.shape[-1],), w.norm, w.eps), w.head, w.head_b)

    @staticmethod
    def _layers(w: _Weights, x: Tensor, rot: Tensor, cache: list, col: int, mask: Tensor) -> Tensor:
        """All decoder blocks on ``x`` [n, s, d] at cache columns ``col .. col + s - 1``.

        Prefill (s > 1): ``mask`` is a bool [n, 1, s, s] causal mask and attention is SDPA over the new
        columns. Decode (s == 1): ``mask`` is the additive [n, Hkv, 1, S] mask over the whole fixed-width
        cache and attention is two ``bmm`` calls on contiguous views (on CPU, 2-3x faster than SDPA on a
        growing slice of the cache; masked columns cost a little arithmetic, no extra ops).
        """
        n, s, d = x.shape
        H, Hkv, D = w.heads, w.kv_heads, w.head_dim
        rot = rot[:, :, None]  # [n, s, 1, D/2]
        end = col + s
        for layer, (kc, vc) in zip(w.layers, cache):
            h = F.rms_norm(x, (d,), layer.ln1, w.eps)
            qkv = F.linear(h, layer.wqkv, layer.bqkv).view(n, s, H + 2 * Hkv, D)
            qk = torch.view_as_complex(qkv[:, :, : H + Hkv].unflatten(-1, (D // 2, 2)))  # [n, s, H+Hkv, D/2]
            qk = torch.view_as_real(qk * rot).flatten(-2).to(x.dtype)  # [n, s, H+Hkv, D] rotated
            kc[:, :, col:end] = qk[:, :, H:].transpose(1, 2)
            vc[:, :, col:end] = qkv[:, :, H + Hkv :].transpose(1, 2)
            if s == 1:  # q heads of one kv head side by side: [n Hkv, H / Hkv, D]
                q = qk[:, 0, :H].reshape(n * Hkv, H // Hkv, D)
                S = kc.shape[2]
                scores = torch.baddbmm(
                    mask.view(n * Hkv, 1, S), q, kc.view(n * Hkv, S, D).transpose(1, 2), alpha=D**-0.5
                )  # [n Hkv, H / Hkv, S]
                o = torch.bmm(scores.softmax(-1), vc.view(n * Hkv, S, D)).view(n, s, H * D)
            else:
                o = F.scaled_dot_product_attention(
                    qk[:, :, :H].transpose(1, 2),
                    kc[:, :, :end],
                    vc[:, :, :end],
                    attn_mask=mask,
                    enable_gqa=H != Hkv,
                )  # [n, H, s, D]
                o = o.transpose(1, 2).reshape(n, s, H * D)
            x = x + F.linear(o, layer.wo, layer.bo)
            gate, up = F.linear(F.rms_norm(x, (d,), layer.ln2, w.eps), layer.wgu, layer.bgu).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, layer.wd, layer.bd)
        return x
