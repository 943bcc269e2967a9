"""Shared benchmark plumbing: interleaved timing, a printed table, a JSON record.

This machine is shared and noisy, so contenders are timed round-robin (one step of
each in turn, many rounds), and each is summarised by its fastest step: load from
other processes only ever adds time, so the minimum is the least disturbed estimate of
a step's cost, and a burst hits every contender alike. Medians are kept alongside.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
from typing import Callable

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "bench" / "results"
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


LR_DECAY_HELP = (
    "both sides: from_peak (the rate decays from the end of warm-up, as HF's get_linear_schedule_with_warmup) "
    "or original (decay counted from step 0, as the original BERT: 10%% lower after a 10%% warm-up)"
)


def torch_schedule(optimizer, warmup: int, total: int, decay: str):
    """`bert_tf.optimization.WarmupLinearDecay(decay=...)` for a torch optimizer: HF's own
    `get_linear_schedule_with_warmup` for "from_peak", the original's curve for "original"."""
    import torch
    import transformers

    if decay == "from_peak":
        return transformers.get_linear_schedule_with_warmup(optimizer, warmup, total)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: step / warmup if step < warmup else max(0.0, 1.0 - step / total)
    )


def torch_decay_groups(model, weight_decay: float = 0.01) -> list[dict]:
    """BERT's weight decay for a torch optimizer: on every weight but biases and LayerNorms."""
    decayed = lambda name: not any(key in name for key in ("bias", "LayerNorm"))  # noqa: E731
    named = list(model.named_parameters())
    return [
        {"params": [p for n, p in named if decayed(n)], "weight_decay": weight_decay},
        {"params": [p for n, p in named if not decayed(n)], "weight_decay": 0.0},
    ]


def torch_adamw(model, learning_rate: float):
    """torch's AdamW as BERT's (epsilon 1e-6, decay off biases and LayerNorms): the update of
    ours with `--adam_bias_correction`."""
    import torch

    return torch.optim.AdamW(torch_decay_groups(model), lr=learning_rate, eps=1e-6)


def torch_update(model, optimizer, schedule, loss) -> None:
    """One step of the PyTorch side: backward, global-norm clipping at 1.0 (as BERT), update."""
    import torch

    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad()


def hf_masked_lm_logits(model, inputs: dict, positions):
    """A `transformers.BertForPreTraining`'s masked-LM logits at `positions` only (as the
    original and ours score them: its own forward scores every position) and its NSP logits."""
    import torch

    outputs = model.bert(**inputs)
    sequence = outputs.last_hidden_state
    gathered = torch.gather(sequence, 1, positions.unsqueeze(-1).expand(-1, -1, sequence.shape[-1]))
    return model.cls(gathered, outputs.pooler_output)


def data_dir() -> pathlib.Path:
    """The shared data folder; a benchmark run from a clone elsewhere names it in BERT_TF_DATA."""
    folder = pathlib.Path(os.environ.get("BERT_TF_DATA", REPO_ROOT.parent / "shared" / "data"))
    if not folder.is_dir():
        raise SystemExit(f"The shared data folder {folder} does not exist: set BERT_TF_DATA to shared/data.")
    return folder


def interleaved_times(
    steps: dict[str, Callable[[], object]], rounds: int, warmup: int = 2
) -> dict[str, dict[str, float]]:
    """{"min", "median"} seconds per call of each step, timed round-robin after `warmup` calls each."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: {"min": min(v), "median": statistics.median(v)} for name, v in times.items()}


def child_result(argv: list[str], env: dict[str, str] | None = None) -> dict:
    """Runs a benchmark's child process and returns the JSON of its `RESULT {...}` stdout line."""
    output = subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout
    return json.loads(next(line for line in output.splitlines() if line.startswith("RESULT "))[len("RESULT "):])


def print_table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    print("  ".join("-" * widths[c] for c in columns))
    for row in rows:
        print("  ".join(_fmt(row.get(c)).ljust(widths[c]) for c in columns))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return "" if value is None else str(value)


def cpu() -> dict:
    """The CPU's model name and whether it has the bf16 instructions (AVX512-BF16, AMX)."""
    text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Model name")), "")
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("Flags")), [])
    return {"model_name": model, "avx512_bf16": "avx512_bf16" in flags, "amx": sorted(f for f in flags if "amx" in f)}


def write_json(name: str, payload: dict) -> pathlib.Path:
    """Writes bench/results/<name>.json with the machine it ran on."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": name,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        **payload,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def model_garden_encoder(config):
    """Model Garden's `networks.BertEncoder` (the reference) for a `BertConfig`, with the
    original's tanh GELU, dropout and initialiser."""
    import tf_keras
    from official.nlp.modeling import networks

    return networks.BertEncoder(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        inner_dim=config.intermediate_size,
        inner_activation=lambda x: tf_keras.activations.gelu(x, approximate=True),
        output_dropout=config.hidden_dropout_prob,
        attention_dropout=config.attention_probs_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size,
        initializer=tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range),
        dict_outputs=True,
    )
