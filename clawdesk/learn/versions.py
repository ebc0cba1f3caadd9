"""Adapter versions: the files of each version on disk, its ``adapters`` row, and the llama.cpp load check.

Version ``N`` lives in ``<adapters dir>/v<N>``::

    adapter_config.json, adapter_model.safetensors   PEFT (model.save_pretrained), for further training
    adapter.gguf                                     GGUF LoRA, what llama.cpp serves
    metadata.json                                    base name + sha256, samples, metrics, validation

The dir is filled under a hidden staging name and renamed into place only when complete, then the
``adapters`` row and its ``adapter_samples`` rows (one per step trained on) are written in one transaction
(:mod:`clawdesk.store.versions` owns the rows), so a crash leaves
either nothing or a dir without a row (its number is then skipped, never reused). Only rows with
status ``'ready'`` are ever served; ``'rejected'`` ones stay on disk and in the log for inspection.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from clawdesk.dirlock import try_lock
from clawdesk.errors import AdapterError, TrainError
from clawdesk.learn.offline import import_offline
from clawdesk.private import make_private
from clawdesk.store import versions as rows
from clawdesk.store.log import Store
from clawdesk.store.versions import (
    ADAPTER_GGUF,
    AdapterVersion,
    get_version,
    latest_ready,
    list_versions,
    version_samples,
)

METADATA_JSON = "metadata.json"
# The rows' names, for the learning stage's callers (the rows themselves are clawdesk.store.versions').
__all__ = [
    "ADAPTER_GGUF",
    "METADATA_JSON",
    "AdapterVersion",
    "check_in_llama_cpp",
    "get_version",
    "latest_ready",
    "list_versions",
    "next_version",
    "publish",
    "record_version",
    "run_lock",
    "staging_dir",
    "validate",
    "version_samples",
    "write_adapter",
    "write_metadata",
]
_VERSION_DIR = re.compile(r"^v(\d+)$")


def next_version(store: Store, adapters_dir: Path) -> int:
    """One past the highest version in the log *or* on disk (a dir left by a crash is never overwritten)."""
    on_disk = [int(m[1]) for p in _list_dir(adapters_dir) if (m := _VERSION_DIR.match(p.name))]
    return max([rows.highest_version(store), *on_disk]) + 1


def _list_dir(path: Path) -> list[Path]:
    return list(path.iterdir()) if path.is_dir() else []


def staging_dir(adapters_dir: Path, version: int) -> Path:
    """An empty hidden dir to fill with version ``version``'s files before :func:`publish` renames it."""
    staged = adapters_dir / f".staging-v{version}"
    try:
        adapters_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if staged.exists():  # left by a run that crashed; the run lock says nobody else owns it
            shutil.rmtree(staged)
        staged.mkdir(mode=0o700)
    except OSError as exc:
        raise TrainError(f"Cannot create {staged} ({exc}); check that {adapters_dir} is writable.") from exc
    return staged


def write_adapter(model, out_dir: Path, *, arch: str, n_head: int, n_head_kv: int) -> dict[str, Any]:
    """Save ``model`` (a PeftModel) into ``out_dir`` as a PEFT dir plus ``adapter.gguf``; return the LoRA shape."""
    import_offline()  # learn/offline.py: bitsandbytes is imported with the Hub offline
    from peft import get_peft_model_state_dict
    from safetensors import SafetensorError

    from clawdesk.gguf.lora import write_gguf_lora

    cfg = model.peft_config["default"]
    try:
        # No embedding layers are adapted; "auto" would look for the base's config.json, even on the Hub.
        model.save_pretrained(str(out_dir), save_embedding_layers=False)
    except (OSError, SafetensorError) as exc:  # safetensors reports a full disk as its own error, not OSError
        raise TrainError(f"Cannot write the PEFT adapter to {out_dir} ({exc}); check free disk space.") from exc
    write_gguf_lora(
        get_peft_model_state_dict(model, save_embedding_layers=False),
        out_dir / ADAPTER_GGUF,
        arch=arch,
        alpha=float(cfg.lora_alpha),
        rank=int(cfg.r),
        n_head=n_head,
        n_head_kv=n_head_kv,
    )
    return {"r": int(cfg.r), "alpha": float(cfg.lora_alpha), "target_modules": sorted(cfg.target_modules)}


def write_metadata(out_dir: Path, metadata: dict[str, Any]) -> None:
    try:
        (out_dir / METADATA_JSON).write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    except OSError as exc:
        raise TrainError(f"Cannot write {out_dir / METADATA_JSON} ({exc}); check free disk space.") from exc


def publish(staged: Path, adapters_dir: Path, version: int) -> Path:
    """Rename the complete staging dir to ``<adapters_dir>/v<version>`` (atomic on one filesystem)."""
    pause_for_crash_test("publish")
    final = adapters_dir / f"v{version}"
    if final.exists():
        raise TrainError(f"{final} already exists; adapter versions are never overwritten. Move it aside and retry.")
    try:
        # save_pretrained and the GGUF writer create files with the umask (often world-readable);
        # what was learned from someone's chats is theirs alone, so 0700/0600 before it is published.
        make_private(staged)
        os.rename(staged, final)
    except OSError as exc:
        raise TrainError(f"Cannot move {staged} to {final} ({exc}).") from exc
    return final


def record_version(store: Store, **record: Any) -> AdapterVersion:
    """The crash-test hook, then the row and its samples (:func:`clawdesk.store.versions.record_version`)."""
    pause_for_crash_test("record")
    return rows.record_version(store, **record)


def check_in_llama_cpp(base_gguf: Path, adapter_gguf: Path, probe_ids: Iterable[int]) -> dict[str, Any]:
    """Load ``adapter_gguf`` onto ``base_gguf`` in llama.cpp, evaluate a few tokens, return the findings.

    ``{"loads": bool, "finite": bool, "n_probe_tokens": int, "error": str}``: ``loads`` is whether
    llama.cpp accepted the adapter for this base (its own shape and arch checks), ``finite`` whether
    the logits after ``probe_ids`` (cut to 16 tokens) are finite with the adapter applied. The serving
    engine uses the same calls (see ``Engine.load_adapter``).
    """
    import ctypes

    import llama_cpp
    import numpy as np

    probe = list(probe_ids)[:16] or [0]
    result: dict[str, Any] = {"loads": False, "finite": False, "n_probe_tokens": len(probe), "error": ""}
    try:
        # logits_all: llama-cpp-python keeps no logits of eval() otherwise (64 rows are cheap).
        llm = llama_cpp.Llama(
            model_path=str(base_gguf), n_ctx=64, n_batch=64, n_threads=1, logits_all=True, verbose=False
        )
    except (ValueError, RuntimeError, OSError) as exc:
        raise AdapterError(f"llama.cpp could not load the base {base_gguf} to check the adapter ({exc}).") from exc
    try:
        adapter = llama_cpp.llama_adapter_lora_init(llm._model.model, str(adapter_gguf).encode("utf-8"))
        if not adapter:
            result["error"] = f"llama.cpp rejected {adapter_gguf} for the base {base_gguf.name}"
            return result
        result["loads"] = True
        try:
            adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(adapter)
            scales = (ctypes.c_float * 1)(1.0)
            if llama_cpp.llama_set_adapters_lora(llm._ctx.ctx, adapters, 1, scales) != 0:
                result["error"] = "llama.cpp refused to apply the adapter to a context"
                return result
            llm.reset()
            llm.eval(probe)
            logits = np.asarray(llm.scores[llm.n_tokens - 1])  # (vocab,) the last position's logits
            result["finite"] = bool(np.isfinite(logits).all())
            if not result["finite"]:
                result["error"] = "llama.cpp logits with the adapter contain inf/nan"
        finally:
            llama_cpp.llama_set_adapters_lora(llm._ctx.ctx, None, 0, None)
            llama_cpp.llama_adapter_lora_free(adapter)
    finally:
        llm.close()
    return result


def validate(
    base_gguf: Path,
    adapter_gguf: Path,
    probe_ids: Iterable[int],
    *,
    heldout_ids: Sequence[int],
    before: dict[str, Any] | None,
    after: dict[str, Any],
    max_drop: float,
    guard: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Decide whether a new version may be served; returns the ``validation`` record of its row.

    Checks: llama.cpp loads the GGUF LoRA onto the base and gives finite logits
    (:func:`check_in_llama_cpp`); the transformers log-probs with the adapter (``after``:
    ``{"mean", "n_tokens", "finite"}``) are finite; and the mean log-prob per token of the held-out
    replies fell by at most ``max_drop`` nats against ``before`` (the previous version, or the
    base, on the same replies). Without held-out replies (``before`` None) that last check is
    skipped and says so. ``guard`` is :func:`clawdesk.learn.guard.check`'s record (or
    ``{"skipped": why}``): its ``passed`` False rejects the version. ``passed`` is the verdict,
    ``problems`` the reasons, for the row's note.
    """
    llama = check_in_llama_cpp(base_gguf, adapter_gguf, probe_ids)
    problems = []
    if not llama["loads"] or not llama["finite"]:
        problems.append(f"llama.cpp check failed ({llama['error']})")
    if not after["finite"]:
        problems.append("transformers log-probs with the adapter are not finite")
    held: dict[str, Any] = {"turn_ids": list(heldout_ids), "max_drop": max_drop}
    if before is not None:
        drop = before["mean"] - after["mean"]
        held |= {"n_tokens": after["n_tokens"], "logp_before": before["mean"], "logp_after": after["mean"]}
        held["drop"] = drop
        if not drop <= max_drop:  # `not <=` so that a nan drop fails too
            problems.append(
                f"held-out log-prob fell by {drop:.4g} nats/token (allowed {max_drop:g}): the adapter damages "
                "earlier replies"
            )
    else:
        held["skipped"] = "no earlier replies to hold out yet"
    guard = guard or {"skipped": "not checked"}
    if guard.get("passed") is False:
        problems.append(
            f"general ability fell: the guard texts' perplexity is {guard['ppl_ratio']:.3f}x the base's (allowed "
            f"{guard['max_ppl_ratio']:g}x, train.max_ppl_ratio){_scales(guard)}; the adapter drifts from the base"
        )
    return {
        "passed": not problems,
        "problems": "; ".join(problems),
        "llama_cpp": llama,
        "finite": after["finite"],
        "heldout": held,
        "guard": guard,
    }


def _scales(guard: dict[str, Any]) -> str:
    """How far the trainer backed off before giving up, when it did (see trainer._Run.guarded_step)."""
    if len(guard.get("tried", ())) < 2:
        return ""
    tried = ", ".join(f"{r:.3f}" for r in guard["tried"])
    return f" even at {guard['lr_scale']:g}x the learning rate (tries: {tried})"


def pause_for_crash_test(point: str) -> None:
    """Test hook: with ``CLAWDESK_TEST_PAUSE_AT=<point>`` print ``clawdesk-test-pause <point>`` on stderr and wait.

    The crash tests (tests/system/test_crash.py) SIGKILL the trainer exactly between writing a version's
    files and publishing them (``publish``), or between publishing and recording the row
    (``record``); without a hook they could only guess when that is. The variable is read at call
    time and is never set outside those tests; the process blocks on a line of stdin.
    """
    if os.environ.get("CLAWDESK_TEST_PAUSE_AT") != point:
        return
    sys.stderr.write(f"clawdesk-test-pause {point}\n")
    sys.stderr.flush()
    sys.stdin.readline()


@contextlib.contextmanager
def run_lock(adapters_dir: Path) -> Iterator[None]:
    """Hold ``<adapters_dir>/.train.lock``: one training run per adapters dir, or a :class:`TrainError`.

    Two runs would race for version numbers and samples. POSIX advisory lock, released when the
    process ends however it ends; where ``fcntl`` is missing (Windows) the UNIQUE ``step_id`` of
    ``adapter_samples`` still refuses a second use of a turn or step.
    """
    try:
        handle = try_lock(adapters_dir / ".train.lock")
    except OSError as exc:
        raise TrainError(f"Cannot use the adapters dir {adapters_dir} ({exc}); check its permissions.") from exc
    if handle is None:
        raise TrainError(f"Another training run is using {adapters_dir}; wait for it to finish, then try again.")
    try:
        yield
    finally:
        handle.close()  # closing releases the lock
