"""The real Qwen3 chat template and Qwen2/3 tokenizer, fetched once for tests without a model hub.

llama-cpp-python's source distribution on the package registry vendors llama.cpp's test data, among
it ``models/templates/Qwen-Qwen3-0.6B.jinja`` (the Qwen3 family's template: tools, ``<tool_response>``,
thinking) and ``models/ggml-vocab-qwen2.gguf`` (a vocab-only GGUF of the same byte-level BPE). This
module downloads that sdist with pip (``pip download --no-deps --no-binary :all:``, so pip's own cache,
index settings and hash checks apply), keeps just those two files, checked against pinned sha256s,
in ``$CLAWDESK_TEST_CACHE`` or ``~/.cache/clawdesk-test``, and deletes the 76 MB archive. Nothing of
it is ever committed. Offline, put ``llama_cpp_python-0.3.36.tar.gz`` into the cache dir by hand.

:func:`write_real_qwen3_gguf` then builds the tiny random Qwen3 of :mod:`clawdesk.testing.tiny_qwen3`
with that template and vocab, so prompts are rendered and tokenized as Qwen3-4B will see them.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from clawdesk.errors import ClawDeskError

SDIST_VERSION = "0.3.36"  # pinned: the files below are checked byte for byte
SDIST_NAME = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
PIP_TIMEOUT_S = 900  # pip also fetches the sdist's build backend to read its metadata (~1 min here)

# file in the cache dir -> (member of the sdist, sha256)
FILES = {
    "Qwen-Qwen3-0.6B.jinja": (
        f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/models/templates/Qwen-Qwen3-0.6B.jinja",
        "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5",
    ),
    "ggml-vocab-qwen2.gguf": (
        f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/models/ggml-vocab-qwen2.gguf",
        "44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c",
    ),
}


class Qwen3AssetsError(ClawDeskError):
    """The real Qwen3 template/tokenizer could not be fetched or failed its checksum."""


@dataclass(frozen=True)
class Qwen3Assets:
    template_path: Path
    vocab_path: Path

    @property
    def template(self) -> str:
        return self.template_path.read_text(encoding="utf-8")


def cache_dir() -> Path:
    env = os.environ.get("CLAWDESK_TEST_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "clawdesk-test"


def qwen3_assets(cache: Path | None = None) -> Qwen3Assets:
    """The two files, fetched on first use. Raises :class:`Qwen3AssetsError` (saying what to do) when
    the registry cannot be reached or a file does not match its pinned checksum."""
    cache = Path(cache) if cache is not None else cache_dir()
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Qwen3AssetsError(f"cannot create the test cache {cache} ({exc}); set CLAWDESK_TEST_CACHE") from exc
    assets = Qwen3Assets(cache / "Qwen-Qwen3-0.6B.jinja", cache / "ggml-vocab-qwen2.gguf")
    if _all_present(cache):
        return assets
    # One process fetches; parallel test runs wait for it instead of downloading 76 MB each.
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _all_present(cache):
            sdist = cache / SDIST_NAME
            if not sdist.is_file():
                _pip_download(cache)
            _extract(sdist, cache)
            sdist.unlink()
    return assets


def _all_present(cache: Path) -> bool:
    return all((cache / name).is_file() and _sha256(cache / name) == sha for name, (_, sha) in FILES.items())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pip_download(cache: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--disable-pip-version-check"]
    cmd += ["-d", str(cache), f"llama-cpp-python=={SDIST_VERSION}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise Qwen3AssetsError(f"`{' '.join(cmd)}` took over {PIP_TIMEOUT_S} s; {_OFFLINE_HINT}") from exc
    if done.returncode != 0 or not (cache / SDIST_NAME).is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise Qwen3AssetsError(f"`{' '.join(cmd)}` failed ({' / '.join(tail)}); {_OFFLINE_HINT}")


_OFFLINE_HINT = (
    "the tests that need the real Qwen3 template and tokenizer fetch llama-cpp-python's sdist from the "
    f"package registry once. Check the network or pip's index settings, or put {SDIST_NAME} into "
    "the cache dir (CLAWDESK_TEST_CACHE, default ~/.cache/clawdesk-test) by hand"
)


def _extract(sdist: Path, cache: Path) -> None:
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            for name, (member, sha) in FILES.items():
                source = tar.extractfile(member)
                if source is None:
                    raise Qwen3AssetsError(f"{sdist} has no file {member}; delete it and run the tests again")
                data = source.read()
                if hashlib.sha256(data).hexdigest() != sha:
                    raise Qwen3AssetsError(
                        f"{member} in {sdist} does not match its pinned sha256; delete {sdist} and run again"
                    )
                # Written under a temporary name and renamed, so a killed run never leaves half a file.
                with tempfile.NamedTemporaryFile(dir=cache, delete=False) as out:
                    out.write(data)
                os.replace(out.name, cache / name)
    except (tarfile.TarError, KeyError, OSError, EOFError) as exc:
        raise Qwen3AssetsError(f"cannot read {sdist} ({exc}); delete it and run the tests again") from exc


def write_real_qwen3_gguf(path: Path, assets: Qwen3Assets, *, seed: int = 0, context_length: int = 4096) -> Path:
    """The tiny random Qwen3 with Qwen3's real template and 151,936-token vocab (hidden size 16, so
    the tied embedding stays ~10 MB)."""
    from clawdesk.testing.tiny_qwen3 import qwen3_vocab, write_tiny_qwen3_gguf

    return write_tiny_qwen3_gguf(
        path,
        seed=seed,
        hidden=16,
        ffn=32,
        context_length=context_length,
        embed_std=0.25,
        vocab=qwen3_vocab(assets.vocab_path),
        chat_template=assets.template,
    )
