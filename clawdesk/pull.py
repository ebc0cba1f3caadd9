"""``clawdesk pull``: download a known model file from the Hugging Face Hub, resumably, verify it, put it in place.

This is the only network access in ClawDesk, and it happens only when the person runs a pull.

Layout under ``models_dir``::

    <filename>                  the verified model; the only thing ``resolve_model`` ever serves
    .download/<filename>.part   the download so far; survives errors and Ctrl-C, the next pull appends to it
    <filename>.bad              a file that failed the size/sha256 check, set aside for inspection

A file reaches its final name only by ``os.replace`` after the size and sha256 checks pass, so an
interrupted or corrupt download never sits under the name the engine loads.

Why not ``hf_hub_download``: in huggingface_hub 2.4 it writes to a per-process
``*.<uuid>.incomplete`` file and deletes it when the call fails, so a pull that dies at 2 of 2.5 GB
starts over (read from its source). We use its public pieces instead: ``get_hf_file_metadata``
(one HEAD: size and ETag, which for LFS- and Xet-stored files is the sha256) and ``http_get``
(a streaming GET that sends ``Range: bytes=N-`` when given ``resume_size=N``, and within one call
retries a dropped connection from where it stopped). The GET goes to the plain ``/resolve/`` URL,
which the hub redirects to its CDN, Xet-stored files included (huggingface_hub's own fallback
when ``hf_xet`` is missing); the Xet protocol itself cannot resume into a file of ours.

Progress: ``http_get`` draws a tqdm bar itself. We hand it a tqdm-shaped class (``tqdm_class``)
that forwards bytes written to ``progress(done, total)``, starting at the resumed size.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from clawdesk import models
from clawdesk.errors import PullError
from clawdesk.models import KnownModel
from clawdesk.store.db import ensure_dir

STAGING_DIRNAME = ".download"
PART_SUFFIX = ".part"
BAD_SUFFIX = ".bad"
HASH_CHUNK = 1 << 20

Progress = Callable[[int, int], None]
Status = Callable[[str], None]
# download(known, out, resume_size, progress): write the file's bytes from offset resume_size on to out.
Download = Callable[[KnownModel, BinaryIO, int, Progress], None]

# OSError errnos that mean "our disk", not "the network": they get a disk message, not a hub one.
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS})


def pull_model(
    name: str,
    models_dir: Path,
    *,
    progress: Progress | None = None,
    download: Download | None = None,
    verify: bool = True,
    status: Status | None = None,
) -> Path:
    """Make sure the known model ``name`` is at ``models_dir/<filename>``, downloading it if needed.

    A download continues from ``models_dir/.download/<filename>.part`` when an earlier pull left one.
    ``progress(done, total)`` is called with bytes while downloading (``done`` starts at the resumed
    size) and again (from 0) while hashing; ``status(message)`` announces each phase, including
    "already downloaded", so the caller can relabel its bar. ``download`` defaults to
    :func:`hub_download` (tests pass a local fake). ``verify=False`` skips the sha256 check (size is
    always checked). Returns the final path; raises :class:`PullError` (or ``DataDirError`` for an
    unwritable dir).
    """
    known = known_model(name)
    say = status or _quiet
    ensure_dir(models_dir, "models directory")
    final = models_dir / known.filename

    if final.is_file():
        problem = _check(final, known, verify=verify, progress=progress, say=say)
        if problem is None:
            say(f"{known.name} is already downloaded: {final}")
            return final
        bad = _set_aside(final)
        say(f"{final} {problem}; moved it to {bad} and downloading it again")

    staging = ensure_dir(models_dir / STAGING_DIRNAME, "download folder")
    part = partial_path(models_dir, known)
    resumed = _size_or_zero(part)
    if resumed > known.size:
        _discard(part)
        say(
            f"discarded {part}: it has {resumed:,} bytes, more than the {known.size:,} of {known.filename}, "
            "so it is not a partial download of it; downloading from the start"
        )
        resumed = 0

    if resumed < known.size:
        _fetch(known, part, resumed, download or hub_download, progress=progress, say=say)
    else:
        say(f"{part} was completed by an earlier pull; checking it before installing")

    problem = _check(part, known, verify=verify, progress=progress, say=say)
    if problem is not None:
        bad = _set_aside(part, final)
        earlier = (
            f" The first {resumed / 1e6:,.1f} MB of it came from an earlier, interrupted pull and may have been "
            "damaged on disk; that partial data is discarded, so the next pull starts from the beginning."
            if resumed
            else ""
        )
        raise PullError(
            f"the downloaded {known.filename} {problem}, so it was not installed. It was moved to {bad} "
            f"(delete it to free the space).{earlier} Run `clawdesk pull {known.name}` to download it again; if "
            "this repeats, the file on the hub has changed and ClawDesk's checksum needs an update."
        )
    try:
        os.replace(part, final)
    except OSError as exc:
        raise PullError(f"cannot move the verified download {part} to {final}: {exc.strerror or exc}.") from exc
    _clean_staging(staging, say)
    say(f"{known.name} is ready: {final}")
    return final


def hub_download(
    known: KnownModel, out: BinaryIO, resume_size: int, progress: Progress, *, endpoint: str | None = None
) -> None:
    """Write ``known``'s file from byte ``resume_size`` on to ``out``, from the Hugging Face Hub.

    One HEAD checks that the hub still has the file ClawDesk pins (size, and the ETag, which is the
    sha256 for LFS/Xet files) before any byte is fetched; then ``http_get`` streams the rest with
    ``Range: bytes=<resume_size>-``. ``endpoint`` overrides ``HF_ENDPOINT`` (tests use a local hub).
    """
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    url = hf_hub_url(known.repo_id, known.filename, endpoint=endpoint)
    meta = get_hf_file_metadata(url, endpoint=endpoint, retry_on_errors=True)
    _refuse_changed_file(known, size=meta.size, etag=meta.etag)
    headers = build_hf_headers()
    # Byte ranges are only meaningful on the identity encoding; a compressing proxy could ignore them.
    headers["Accept-Encoding"] = "identity"
    http_get(
        url,
        out,
        resume_size=resume_size,
        headers=headers,
        expected_size=known.size,
        displayed_filename=known.filename,
        tqdm_class=_ByteReporter(progress, known.size).tqdm_class(),
    )


def partial_path(models_dir: Path, known: KnownModel) -> Path:
    """Where a pull of ``known`` keeps its download so far: ``models_dir/.download/<filename>.part``."""
    return models_dir / STAGING_DIRNAME / (known.filename + PART_SUFFIX)


def known_model(name: str) -> KnownModel:
    """The registry entry for ``name`` (case-insensitive), or a :class:`PullError` listing the known ones."""
    key = name.strip().lower()
    if key not in models.KNOWN_MODELS:
        names = ", ".join(sorted(models.KNOWN_MODELS))
        raise PullError(
            f"unknown model {name!r}: `clawdesk pull` knows {names}. "
            "To serve another GGUF, download it yourself and use --model PATH."
        )
    return models.KNOWN_MODELS[key]


def sha256_file(path: Path, progress: Progress | None = None) -> str:
    """Hex sha256 of ``path``, calling ``progress(done, total)`` after each 1 MiB block."""
    total = path.stat().st_size
    digest = hashlib.sha256()
    done = 0
    with path.open("rb") as fh:
        while block := fh.read(HASH_CHUNK):
            digest.update(block)
            done += len(block)
            if progress is not None:
                progress(done, total)
    return digest.hexdigest()


def _fetch(
    known: KnownModel, part: Path, resumed: int, download: Download, *, progress: Progress | None, say: Status
) -> None:
    """Append the rest of the file to ``part``; on failure keep it and raise a PullError that says so."""
    total_mb = known.size / 1e6
    if resumed:
        say(f"resuming {known.repo_id}/{known.filename} at {resumed / 1e6:,.1f} of {total_mb:,.1f} MB ({part})")
    else:
        say(f"downloading {known.repo_id}/{known.filename} ({total_mb:,.1f} MB) into {part.parent.parent}")
    try:
        # Append mode: bytes already on disk stay; whatever arrives (until an error or Ctrl-C) is kept
        # for the next pull, because closing the file flushes it and nothing here deletes it.
        with part.open("ab") as out:
            download(known, out, resumed, progress or _no_progress)
    except _network_errors() as exc:
        raise _download_error(known, exc, part=part) from exc


def _refuse_changed_file(known: KnownModel, *, size: int | None, etag: str | None) -> None:
    """Raise before downloading when the hub's file is not the one ClawDesk pins (saves a 2.5 GB download)."""
    sha = etag if etag is not None and len(etag) == 64 and all(c in "0123456789abcdef" for c in etag) else None
    if (size is None or size == known.size) and (sha is None or sha == known.sha256):
        return
    seen = f"{size:,} bytes" if size is not None else "an unknown size"
    raise PullError(
        f"the hub's {known.filename} (repo {known.repo_id}) is not the file ClawDesk expects: it has {seen}"
        f"{f' and sha256 {sha}' if sha else ''}, ClawDesk expects {known.size:,} bytes and sha256 {known.sha256}. "
        "Nothing was downloaded. The file on the hub has changed and ClawDesk's entry for "
        f"{known.name} needs an update; meanwhile serve any local GGUF file with --model PATH."
    )


def _check(path: Path, known: KnownModel, *, verify: bool, progress: Progress | None, say: Status) -> str | None:
    """What is wrong with ``path`` as a copy of ``known`` (a phrase), or None when it is right."""
    try:
        size = path.stat().st_size
        if size != known.size:
            return f"has {size:,} bytes instead of {known.size:,}"
        if not verify:
            return None
        say(f"verifying sha256 of {path.name}")
        digest = sha256_file(path, progress)
    except OSError as exc:
        raise PullError(f"cannot read {path} to verify it: {exc.strerror or exc}.") from exc
    if digest != known.sha256:
        return f"has sha256 {digest} instead of {known.sha256}"
    return None


def _set_aside(path: Path, final: Path | None = None) -> Path:
    """Rename a failed file to ``<final name>.bad`` (replacing an older one) and return the new path."""
    target = final or path
    bad = target.with_name(target.name + BAD_SUFFIX)
    try:
        os.replace(path, bad)
    except OSError as exc:
        raise PullError(
            f"{path} failed verification and cannot be moved aside to {bad}: {exc.strerror or exc}. Delete it by hand."
        ) from exc
    return bad


def _discard(part: Path) -> None:
    try:
        part.unlink()
    except OSError as exc:
        raise PullError(
            f"{part} is not a partial download of this model and cannot be deleted: {exc.strerror or exc}. "
            "Delete it by hand and run the pull again."
        ) from exc


def _size_or_zero(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise PullError(f"cannot read the partial download {path}: {exc.strerror or exc}.") from exc


def _clean_staging(staging: Path, say: Status) -> None:
    # Remove the staging folder once empty (another model's .part may still live there); failing
    # to tidy up must not fail a pull whose model is already verified and in place.
    try:
        if any(staging.iterdir()):
            return
        staging.rmdir()
    except OSError as exc:
        say(f"note: could not remove the download folder {staging}: {exc.strerror or exc}")


def _network_errors() -> tuple[type[BaseException], ...]:
    """Exceptions a download can raise for network, hub or disk reasons (not programming errors).

    huggingface_hub's own errors are OSError subclasses (HfHubHTTPError, OfflineModeIsEnabled);
    the errors of its HTTP client (httpx2 in huggingface_hub 2.x) are not, so add them by name.
    """
    extra: list[type[BaseException]] = [OSError]
    try:
        import httpx2
    except ImportError:  # huggingface_hub < 1.0 uses requests, whose errors are OSErrors
        pass
    else:
        extra.append(httpx2.TransportError)
    return tuple(extra)


def _download_error(known: KnownModel, exc: BaseException, *, part: Path) -> PullError:
    """One paragraph: what failed, why, what was kept, and the ways forward."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    what = f"{known.filename} from the Hugging Face Hub (repo {known.repo_id})"
    final = part.parent.parent / known.filename
    kept = _size_or_zero(part)
    resume = (
        f" {kept / 1e6:,.1f} of {known.size / 1e6:,.1f} MB is kept in {part}, and the next "
        f"`clawdesk pull {known.name}` resumes from {kept / 1e6:,.1f} MB."
        if kept
        else ""
    )
    status_code = _http_status(exc) if isinstance(exc, HfHubHTTPError) else None
    if status_code is not None:
        head = f"could not download {what}: the hub answered HTTP {status_code}."
    elif isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS:
        return PullError(
            f"could not save {what} to {part}: {exc.strerror or exc}.{resume} The model needs "
            f"{(known.size - kept) / 1e9:.1f} GB more free in {final.parent}; free space or choose another "
            "location with --data-dir DIR, then run the pull again."
        )
    else:
        head = f"could not download {what}: the hub could not be reached ({_root_reason(exc)})."
    url = hf_hub_url(known.repo_id, known.filename)
    return PullError(
        f"{head}{resume} Check the connection (and HF_HUB_OFFLINE / HF_ENDPOINT) and run "
        f"`clawdesk pull {known.name}` again, or download {url} by other means and place it at "
        f"{final}, or serve any local GGUF file with --model PATH."
    )


def _http_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _root_reason(exc: BaseException) -> str:
    """The innermost cause's message: "[Errno 111] Connection refused", not the wrapper's advice."""
    seen: set[int] = set()
    while (exc.__cause__ or exc.__context__) is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    name = type(exc).__name__
    if name == "OfflineModeIsEnabled":
        return "offline mode is on: HF_HUB_OFFLINE is set"
    text = str(exc).strip() or name
    return text if len(text) <= 200 else text[:200] + "…"


def _quiet(_message: str) -> None:
    """Default ``status``: a library function prints nothing by itself."""


def _no_progress(_done: int, _total: int) -> None:
    """Default ``progress``."""


class _ByteReporter:
    """Turns ``http_get``'s tqdm calls into ``progress(done, total)``."""

    def __init__(self, progress: Progress, expected_total: int):
        self.progress = progress
        self.expected_total = expected_total

    def report(self, done: int, total: int | None) -> None:
        self.progress(done, total or self.expected_total)

    def tqdm_class(self) -> type:
        """A class ``http_get`` instantiates in place of tqdm, bound to this reporter."""
        return type("ClawDeskDownloadBar", (_TqdmShim,), {"reporter": self})


class _TqdmShim:
    """The slice of tqdm's interface that ``http_get`` uses.

    ``http_get`` creates it with ``initial=<resumed bytes>``, then for each chunk calls ``update``
    (bytes written) and ``update_transfer`` (network bytes, the same ones: ignored so nothing is
    counted twice); when a server ignores the Range and sends the whole file it calls
    ``update(-resumed)``. Not a tqdm subclass on purpose: huggingface_hub then passes only display
    kwargs and draws nothing itself.
    """

    reporter: _ByteReporter

    def __init__(self, *_args: Any, total: int | None = None, initial: int = 0, **_kwargs: Any):
        self.total = total
        self.n = initial
        self.reporter.report(self.n, self.total)

    def update(self, n: int | float = 1) -> None:
        self.n += int(n)
        self.reporter.report(self.n, self.total)

    def update_transfer(self, _n: int | float = 1) -> None:
        """Network bytes: already counted by ``update`` once written to disk."""

    def close(self) -> None:
        """Nothing to release: the caller's ``progress`` owns the display."""

    def __enter__(self) -> _TqdmShim:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


__all__ = [
    "BAD_SUFFIX",
    "PART_SUFFIX",
    "STAGING_DIRNAME",
    "Download",
    "hub_download",
    "known_model",
    "partial_path",
    "pull_model",
    "sha256_file",
]
