"""``clawdesk doctor``: checks of the installation and data dir, each with its verdict and fix.

Owns what is checked and how; :mod:`clawdesk.cli.doctor` owns the printing. Nothing here writes:
the DB is opened read-only (a missing one is "not created yet"), the model's sha256 is taken from
the store's cache when present and otherwise computed without being cached, and no dir is created.
Each check is a :class:`Check` with status ``ok``, ``warn`` (works, with a limitation worth
knowing) or ``fail`` (something is broken; ``fix`` says what to do).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawdesk.config import Config
from clawdesk.errors import AdapterError, ModelError, StoreError
from clawdesk.store.integrity import has_table, integrity_problems, open_read_only, pending_migrations
from clawdesk.store.log import Store
from clawdesk.store.versions import active_adapter, list_versions

GB = 1e9
FP32_BYTES = 4  # CPU training dequantizes the served GGUF to an fp32 transformers model
TRAIN_RAM_MARGIN = 1.25  # activations, LoRA, optimizer and the chat's own llama.cpp copy on top
DISK_FAIL_GB, DISK_WARN_GB = 1.0, 5.0  # a Qwen3-4B pull needs 2.5 GB; each adapter version tens of MB


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # 'ok' | 'warn' | 'fail'
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


@dataclass(frozen=True)
class ModelFacts:
    """What the other checks need to know about the served GGUF."""

    path: Path
    sha256: str
    arch: str
    n_params: int
    metadata: dict[str, Any]


def run_checks(config: Config, cli_model: str | None = None) -> list[Check]:
    """Every check, in the order they are shown."""
    checks = [_llama_cpp()]
    torch_check, cuda = _torch()
    checks += [torch_check, _bitsandbytes(cuda)]
    checks.append(_permissions(config.home))
    db_check, store = _database(config.db_path)
    checks.append(db_check)
    try:
        model_check, model = _served_model(config, cli_model, store)
        checks.append(model_check)
        checks += _adapters(store, model)
    finally:
        if store is not None:
            store.close()
    checks += [_disk(config.home), _memory(model, cuda)]
    if config.tools.enabled:
        checks.append(shell_sandbox_check())
    return checks


def shell_sandbox_check() -> Check:
    """Whether run_shell's writes are confined to the workspace on this machine (said plainly when not)."""
    from clawdesk.tools.shell import sandbox_state

    confined, how = sandbox_state()
    if confined:
        return Check("shell sandbox", "ok", how)
    return Check("shell sandbox", "warn", how, 'Linux 5.13+ with Landlock, or [tools.policy] run_shell = "never"')


def failed(checks: list[Check]) -> bool:
    return any(c.status == "fail" for c in checks)


# -- libraries -----------------------------------------------------------------------------------


def _llama_cpp() -> Check:
    try:
        import llama_cpp
    except ImportError as exc:
        return Check("llama.cpp", "fail", f"llama_cpp cannot be imported ({exc})", "pip install -e . (rebuilds it)")
    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    # The info string lists one "<backend> : features |" group per compiled backend.
    backends = [b for b in ("CUDA", "Metal", "Vulkan", "ROCm", "SYCL") if f"{b} :" in info or f"{b} =" in info]
    gpu = llama_cpp.llama_supports_gpu_offload()
    where = f"GPU offload ({', '.join(backends) or 'yes'})" if gpu else "CPU only (no GPU backend compiled in)"
    return Check("llama.cpp", "ok", f"llama-cpp-python {llama_cpp.__version__}, {where}; {info.strip(' |')[:120]}")


def _torch() -> tuple[Check, bool]:
    try:
        import torch
    except ImportError as exc:
        return Check("torch", "fail", f"torch cannot be imported ({exc})", "pip install torch==2.13.0"), False
    cuda = bool(torch.cuda.is_available())
    where = f"CUDA {torch.version.cuda} on {torch.cuda.get_device_name(0)}" if cuda else "CPU only"
    return Check("torch", "ok", f"torch {torch.__version__}, {where}"), cuda


def _bitsandbytes(cuda: bool) -> Check:
    installed = importlib.util.find_spec("bitsandbytes") is not None
    if not cuda:
        return Check(
            "bitsandbytes",
            "warn",
            "4-bit NF4 needs a CUDA GPU; on this machine training holds the base in fp32 (see memory)"
            + ("" if installed else "; bitsandbytes is not installed"),
        )
    if not installed:
        return Check(
            "bitsandbytes",
            "fail",
            "not installed: the CUDA trainer loads the base in 4-bit NF4",
            "pip install bitsandbytes",
        )
    # In a child process: a broken CUDA setup can abort the importing process.
    code = "import bitsandbytes, torch; torch.zeros(1, device='cuda'); print(bitsandbytes.__version__)"
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return Check("bitsandbytes", "fail", "importing it took over 120 s", "reinstall bitsandbytes for your CUDA")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Check("bitsandbytes", "fail", f"import failed: {last}", "reinstall bitsandbytes for your CUDA version")
    return Check("bitsandbytes", "ok", f"bitsandbytes {proc.stdout.strip()}, 4-bit NF4 training on CUDA")


# -- data dir and database -------------------------------------------------------------------------


def _permissions(home: Path) -> Check:
    if not home.exists():
        return Check("data dir", "ok", f"{home} not created yet (made on first use, mode 0700)")
    mode = home.stat().st_mode & 0o777
    if mode & 0o077:
        return Check("data dir", "fail", f"{home} is mode {mode:04o}: others can read your chats", f"chmod 700 {home}")
    if not os.access(home, os.W_OK | os.X_OK):
        return Check("data dir", "fail", f"{home} is not writable by you", f"chown $USER {home} && chmod 700 {home}")
    return Check("data dir", "ok", f"{home} (mode {mode:04o})")


def _database(path: Path) -> tuple[Check, Store | None]:
    if not path.exists():
        return Check("database", "ok", f"{path} not created yet (made on first chat)"), None
    fix = f"Move it aside (`mv {path} {path}.bad`) and start again; recover old turns with the sqlite3 tool"
    try:
        store = open_read_only(path)  # read-only, never migrated: the doctor changes nothing
    except StoreError as exc:
        return Check("database", "fail", str(exc), fix), None
    problems = integrity_problems(store)
    if problems:
        store.close()
        return Check("database", "fail", f"{path} failed PRAGMA integrity_check: {'; '.join(problems[:3])}", fix), None
    pending = pending_migrations(store)
    mode = path.stat().st_mode & 0o777
    turns = store.count_turns() if not pending else "?"
    detail = f"{path}: integrity ok, {turns} turns, mode {mode:04o}"
    if mode & 0o077:
        return Check("database", "fail", f"{detail}: others can read your chats", f"chmod 600 {path}"), store
    if pending:
        return Check(
            "database", "warn", f"{detail}; schema upgrade pending ({', '.join(pending)}), applied on next start"
        ), store
    return Check("database", "ok", f"{detail}, schema up to date"), store


# -- the served model ------------------------------------------------------------------------------


def _served_model(config: Config, cli_model: str | None, store: Store | None) -> tuple[Check, ModelFacts | None]:
    from clawdesk.gguf.files import check_gguf
    from clawdesk.models import KNOWN_MODELS, file_sha256
    from clawdesk.runtime import resolve_served_model

    try:
        resolved = resolve_served_model(config, cli_model)
        check_gguf(resolved.path)
    except ModelError as err:
        return Check("model", "fail", str(err), "`clawdesk pull`, or --model PATH to a .gguf file"), None
    path = resolved.path
    stat = path.stat()
    cached = None
    if store is not None and has_table(store, "model_files"):
        cached = store.cached_sha256(path, stat.st_size, stat.st_mtime_ns)
    started = time.monotonic()
    sha = cached or file_sha256(path)
    how = "sha256 cached" if cached else f"sha256 computed now in {time.monotonic() - started:.1f} s (not cached yet)"
    known = KNOWN_MODELS.get(resolved.name)
    if known is not None and sha != known.sha256:
        return Check(
            "model", "fail", f"{path}: sha256 {sha[:12]}… is not the published {known.sha256[:12]}… (damaged download)",
            f"rm {path} && clawdesk pull {known.name}",
        ), None  # fmt: skip
    try:
        meta, n_params = read_gguf_header(path)
    except ModelError as err:
        return Check("model", "fail", str(err), f"re-download {path.name} (`clawdesk pull`) or choose --model"), None
    arch = str(meta.get("general.architecture", "unknown"))
    facts = ModelFacts(path=path, sha256=sha, arch=arch, n_params=n_params, metadata=meta)
    size = f"{stat.st_size / GB:.2f} GB, {arch}, {n_params / 1e9:.2f} B params"
    detail = f"{resolved.name}: {path} ({size}, {how} {sha[:12]}…)"
    return Check("model", "ok", detail), facts


def read_gguf_header(path: Path) -> tuple[dict[str, Any], int]:
    """A GGUF's scalar metadata and parameter count, checking that the file holds all its tensor data.

    Arrays (the tokenizer's) are skipped (:mod:`clawdesk.gguf.header`). Raises
    :class:`ModelError` on a damaged or truncated file.
    """
    from clawdesk.gguf.header import HeaderError, read_header

    try:
        header = read_header(path)
    except (OSError, HeaderError) as exc:
        raise ModelError(f"{path} has a damaged GGUF header ({type(exc).__name__}: {exc})") from exc
    if header.data_end > header.file_size:
        raise ModelError(
            f"{path} is truncated: its tensors need {header.data_end / GB:.2f} GB, the file has "
            f"{header.file_size / GB:.2f} GB (GGUF v{header.version})"
        )
    return header.fields, sum(t.n_elements for t in header.tensors)


# -- adapters ----------------------------------------------------------------------------------------


def _adapters(store: Store | None, model: ModelFacts | None) -> list[Check]:
    from clawdesk.gguf.adapters import BaseDims, check_version_dir

    if store is None or not has_table(store, "adapters"):
        return [Check("adapters", "ok", "none trained yet")]
    rows = list_versions(store)
    active = active_adapter(store)
    ready = [(v.version, v.base_name, v.base_sha256, v.path) for v in rows if v.ready]
    serving = f"v{active}" if active is not None else "the base"
    summary = f"{len(ready)} ready, {len(rows) - len(ready)} rejected; serving {serving}"
    checks = [Check("adapters", "ok", summary)]
    dims = BaseDims.from_metadata(model.metadata) if model else None
    for version, base_name, base_sha, path in ready:
        name = f"adapter v{version}"
        this_base = model is not None and base_sha == model.sha256
        try:
            info = check_version_dir(
                Path(path), base_sha256=base_sha, arch=model.arch if this_base else None,
                dims=dims if this_base else None, peft=True, fix="",
            )  # fmt: skip
        except AdapterError as err:
            fix = (
                "`clawdesk adapters rollback` (or `use N`) to serve another version; training continues from the "
                "newest ready version, so restore the file (e.g. from a backup) before training again"
            )
            checks.append(Check(name, "fail" if this_base else "warn", str(err), fix))
            continue
        where = "for the served model" if this_base else f"for another base ({base_name}); not served with this one"
        checks.append(Check(name, "ok", f"{path}: rank {info['rank']}, {info['n_tensors']} GGUF tensors, {where}"))
    return checks


# -- resources ---------------------------------------------------------------------------------------


def _disk(home: Path) -> Check:
    probe = home
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent  # the data dir may not exist yet: the filesystem it will be on
    free = shutil.disk_usage(probe).free / GB
    detail = f"{free:.1f} GB free at {probe}"
    if free < DISK_FAIL_GB:
        return Check("disk", "fail", detail, "free space on that disk, or move the data with --data-dir DIR")
    if free < DISK_WARN_GB:
        return Check("disk", "warn", f"{detail}: a Qwen3-4B pull needs 2.5 GB")
    return Check("disk", "ok", detail)


def _meminfo() -> tuple[float, float | None]:
    """(total, available) RAM in bytes; available is None where /proc/meminfo is missing (macOS)."""
    try:
        fields = {}
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            fields[key] = float(rest.split()[0]) * 1024  # kB
        return fields["MemTotal"], fields.get("MemAvailable")
    except (OSError, KeyError, ValueError, IndexError):
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")), None


def _memory(model: ModelFacts | None, cuda: bool) -> Check:
    total, available = _meminfo()
    have = f"{total / GB:.1f} GB RAM" + (f" ({available / GB:.1f} GB available)" if available is not None else "")
    if model is None:
        return Check("memory", "ok", f"{have}; no model to size training against")
    if cuda:
        need = model.n_params * 0.5 * TRAIN_RAM_MARGIN  # NF4: about half a byte per parameter on the GPU
        return Check(
            "memory", "ok", f"{have}; CUDA training holds the base in 4-bit, ≈ {need / GB:.1f} GB of GPU memory"
        )
    need = model.n_params * FP32_BYTES
    detail = f"{have}; CPU training needs an fp32 copy of {model.n_params / 1e9:.2f} B params ≈ {need / GB:.1f} GB"
    if total < need * TRAIN_RAM_MARGIN:
        return Check(
            "memory",
            "warn",
            f"{detail} plus ~{(TRAIN_RAM_MARGIN - 1):.0%}: training may swap or be killed",
        )
    return Check("memory", "ok", detail)


__all__ = ["Check", "ModelFacts", "failed", "read_gguf_header", "run_checks"]
