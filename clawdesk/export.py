"""Exporting what was learned: an adapter version (PEFT, GGUF, Ollama) and the judged samples.

Every adapter export carries a README with the base model identity and a training summary, so
the folder is useful on its own. ``export_data`` writes TRL-ready conversational JSONL of the turns
:func:`clawdesk.store.samples.labelled_turns` selects: never incognito sessions, turns recorded
with learning OFF, vetoed turns, or turns judged ``0`` (unclear: no label to give them).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from clawdesk.errors import AdapterError, DataDirError, InputError, NotFoundError
from clawdesk.private import make_private, open_private
from clawdesk.store import Store
from clawdesk.store.db import ensure_dir
from clawdesk.store.samples import labelled_turns
from clawdesk.store.versions import active_adapter, get_version, list_versions

FORMATS = ("peft", "gguf", "ollama")
OUT_FIX = "Choose another place with --out."
PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")


def _pick(store: Store, n: int | None):
    if n is None:
        n = active_adapter(store)
    if n is None:
        ready = [v for v in list_versions(store) if v.status == "ready"]
        if not ready:
            raise NotFoundError("there is no trained adapter yet; chat with learning ON, then `clawdesk train`")
        n = ready[-1].version
    row = get_version(store, n)
    if row.status != "ready":
        raise AdapterError(f"adapter v{n} was rejected at validation ({row.note}); export a ready version instead")
    return row


def _readme(row, meta: dict[str, Any], fmt: str, files: list[str]) -> str:
    metrics = meta.get("metrics") or row.metrics
    lines = [
        f"# ClawDesk adapter v{row.version} ({fmt})",
        "",
        "A LoRA adapter personalised on-device by ClawDesk (Binary RL + hindsight-guided OPD).",
        "",
        "## Base model",
        f"- name: {row.base_name}",
        f"- GGUF sha256: {row.base_sha256}",
        f"- base file when trained: {meta.get('base_path', 'unknown')}",
        "",
        "## Training summary",
        f"- samples used: {row.n_samples}",
        f"- created: {row.created_at}",
    ]
    lines += [f"- {k}: {v:.4g}" if isinstance(v, float) else f"- {k}: {v}" for k, v in sorted(metrics.items())]
    lines += ["", "## Files", *[f"- `{f}`" for f in files], ""]
    if fmt == "peft":
        lines += ["Load: `PeftModel.from_pretrained(base_model, this_folder)` on the same base weights.", ""]
    elif fmt == "gguf":
        lines += ["Load: `llama-cli -m BASE.gguf --lora adapter.gguf` or llama-cpp-python `lora_path=`.", ""]
    else:
        lines += ["Load: `ollama create my-clawdesk -f Modelfile` (the FROM line points at the base GGUF).", ""]
    return "\n".join(lines)


def _without_conversation(meta: dict[str, Any]) -> dict[str, Any]:
    """The version's metadata minus anything a person wrote: a sample's hint is their own next message, and
    a learned check's ``wording`` is made from a preference item's text (clawdesk.learn.consolidate).

    Conversations leave the data dir only through ``export-data``, which is asked for by name.
    """
    out = dict(meta)
    if "samples" in meta:
        out["samples"] = [{k: v for k, v in s.items() if k != "hint"} for s in meta["samples"]]
    validation = meta.get("validation")
    if isinstance(validation, dict) and "memory" in validation:  # a check's fingerprint of the item's words
        memory = [{k: v for k, v in c.items() if k != "wording"} for c in validation["memory"]]
        out["validation"] = validation | {"memory": memory}
    return out


def export_adapter(
    store: Store, fmt: str, out_dir: Path, *, n: int | None = None, base_gguf: Path | None = None
) -> Path:
    if fmt not in FORMATS:
        raise AdapterError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    row = _pick(store, n)
    from clawdesk.gguf.adapters import check_version_dir

    # What leaves the data dir must load where it goes: damaged, truncated or foreign files are refused here.
    check_version_dir(
        row.path,
        base_sha256=row.base_sha256,
        peft=fmt == "peft",
        fix="Export another version with --version N (`clawdesk adapters` lists them).",
    )
    meta_path = row.path / "metadata.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    ensure_dir(out_dir, "export folder", OUT_FIX)
    files: list[str] = []
    if fmt == "peft":
        for name in PEFT_FILES:
            src = row.path / name
            if not src.exists():
                raise AdapterError(f"adapter v{row.version} is missing {src}; it cannot be exported as PEFT")
            shutil.copy2(src, out_dir / name)
            files.append(name)
    else:
        if not row.gguf_path.exists():
            raise AdapterError(f"adapter v{row.version} is missing {row.gguf_path}")
        shutil.copy2(row.gguf_path, out_dir / row.gguf_path.name)
        files.append(row.gguf_path.name)
    if fmt == "ollama":
        base = base_gguf or Path(meta.get("base_path", ""))
        if not base or not Path(base).is_file():
            raise AdapterError(f"the base GGUF for v{row.version} was not found ({base}); pass it with --model PATH")
        (out_dir / "Modelfile").write_text(f"FROM {Path(base).resolve()}\nADAPTER ./{row.gguf_path.name}\n")
        files.append("Modelfile")
    if meta:
        (out_dir / "metadata.json").write_text(json.dumps(_without_conversation(meta), indent=2))
        files.append("metadata.json")
    (out_dir / "README.md").write_text(_readme(row, meta, fmt, files))
    for name in [*files, "README.md"]:  # copies and new files follow the umask; an export is as private as its source
        make_private(out_dir / name)
    return out_dir


def export_data(store: Store, out_file: Path) -> int:
    """Write judged samples as JSONL (conversational prompt/completion + reward + hint). Returns the count."""
    rows = labelled_turns(store)
    if out_file.is_dir():
        raise InputError(f"{out_file} is a folder; give --out a file name, e.g. {out_file / 'samples.jsonl'}")
    ensure_dir(out_file.parent, "export folder", OUT_FIX)
    tmp = out_file.with_suffix(out_file.suffix + ".tmp")
    try:
        _write_samples(store, rows, tmp)
        tmp.replace(out_file)
    except OSError as exc:  # disk full, a path that turned into a folder: no half-written file is left behind
        tmp.unlink(missing_ok=True)
        raise DataDirError(f"cannot write {out_file}: {exc.strerror or exc}. {OUT_FIX}") from exc
    return len(rows)


def _write_samples(store: Store, rows: list[dict[str, Any]], tmp: Path) -> None:
    with open_private(tmp, "w") as fh:  # the samples are conversations: owner-only, like the log
        for r in rows:
            earlier = [t for t in store.list_turns(r["session_id"]) if t.seq < r["seq"]][r["dropped_turns"] :]
            prompt = [{"role": "system", "content": r["system_prompt"]}] if r["system_prompt"] else []
            for t in earlier:
                prompt += [
                    {"role": "user", "content": t.user_content},
                    {"role": "assistant", "content": t.reply_content},
                ]
            prompt.append({"role": "user", "content": r["user_content"]})
            reward = r["rating"] if r["rating"] is not None else r["reward"]
            record = {
                "prompt": prompt,
                "completion": [{"role": "assistant", "content": r["reply_content"]}],
                "reward": reward,
                "label": reward > 0,  # KTO-style desirability
                "hint": r["hint"],
                "turn_id": r["id"],
            }
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
