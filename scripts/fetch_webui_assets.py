#!/usr/bin/env python3
"""Fetch the WebUI's Markdown libraries into ``static/vendor/`` (stdlib only; run by setup.sh).

Each library is an exact npm registry tarball pinned by its ``dist.integrity`` (sha512 SRI, from
``npm view NAME@VER dist.tarball dist.integrity``). A tarball is verified before anything is
extracted; only the listed files are written, each through a temporary file and ``os.replace``,
and ``manifest.json`` (pins + sha256 of every file) last. With an intact manifest nothing is
downloaded. The registry is ``$npm_config_registry`` (as for npm), else registry.npmjs.org.

Exit status 0 when the files are in place; 1 with one line on stderr (offline, HTTP error,
integrity mismatch, a listed file missing from a tarball), leaving the previous files as they were.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

DEFAULT_REGISTRY = "https://registry.npmjs.org/"
DEST = Path(__file__).resolve().parents[1] / "static" / "vendor"
MANIFEST = "manifest.json"
TIMEOUT = 60.0
TRIES = 3
MAX_TARBALL_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class Package:
    """One pinned tarball; ``files`` maps a path inside it (below ``package/``) to a vendor name."""

    name: str
    version: str
    integrity: str
    files: dict[str, str]

    def tarball_url(self, registry: str) -> str:
        # npm's layout: <registry>/<name>/-/<name without scope>-<version>.tgz
        base = self.name.rsplit("/", 1)[-1]
        return f"{registry.rstrip('/')}/{self.name}/-/{base}-{self.version}.tgz"

    @property
    def pin(self) -> str:
        return f"{self.name}@{self.version} {self.integrity}"


PACKAGES = (
    Package(
        "markdown-it",
        "15.0.3",
        "sha512-+Az7Ojz3iRGu8KYMvJ6xVhvrxP3eE+vEtJX75Ow88XBpcQNV/0lGX5ZynIIBftREo4DC2jsveAMDaeltmm8QvQ==",
        {"dist/browser/markdown-it.umd.min.js": "markdown-it.min.js"},
    ),
    Package(
        "dompurify",
        "3.5.0",
        "sha512-LYC0ZkE8P1V42JsRYTwMdme/2ET8SpOc5AA2eOFjP/IadvRd2fwiT4TVz5vkfy0XUx12aS2UaRkTnfVPNOv9vw==",
        {"dist/purify.min.js": "purify.min.js"},
    ),
    Package(
        "@highlightjs/cdn-assets",
        "11.12.0",
        "sha512-KvOKXODaiFmId9xaq3xc5xCL66wVLUuOngDbO9B/kewbFTqdGbn2nJxNhN3H5R1cgDTVj6R8vH0zgiNDEGjpDw==",
        {
            "highlight.min.js": "highlight.min.js",
            "styles/github.min.css": "hljs-light.css",
            "styles/github-dark.min.css": "hljs-dark.css",
        },
    ),
)


class FetchError(Exception):
    """Any failure; ``str()`` is the one line shown to the user."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest(packages: tuple[Package, ...], files: dict[str, bytes]) -> dict:
    return {"packages": [p.pin for p in packages], "files": {n: _sha256(d) for n, d in sorted(files.items())}}


def is_intact(dest: Path, packages: tuple[Package, ...] = PACKAGES) -> bool:
    """True when ``dest`` holds a manifest for these pins and every file matches its sha256."""
    try:
        manifest = json.loads((dest / MANIFEST).read_text())
        if manifest.get("packages") != [p.pin for p in packages]:
            return False
        wanted = {name for p in packages for name in p.files.values()}
        if set(manifest.get("files", {})) != wanted:
            return False
        return all(_sha256((dest / n).read_bytes()) == h for n, h in manifest["files"].items())
    except (OSError, ValueError, AttributeError):
        return False


def verify_integrity(data: bytes, integrity: str) -> None:
    """Raise FetchError unless ``data`` matches the ``sha512-<base64>`` SRI string."""
    algo, _, expected = integrity.partition("-")
    if algo != "sha512":
        raise FetchError(f"unsupported integrity algorithm {algo!r} (only sha512 is pinned)")
    actual = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if actual != expected:
        raise FetchError(f"integrity mismatch: expected {integrity}, got sha512-{actual}")


def download(url: str, timeout: float = TIMEOUT, tries: int = TRIES) -> bytes:
    """GET ``url``; retries connection errors and 5xx (at most ``tries``); raises FetchError."""
    for attempt in range(1, tries + 1):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                data = resp.read(MAX_TARBALL_BYTES + 1)
            if len(data) > MAX_TARBALL_BYTES:
                raise FetchError(f"{url}: larger than {MAX_TARBALL_BYTES} bytes")
            return data
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == tries:
                raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
        except (urllib.error.URLError, OSError) as exc:
            if attempt == tries:
                reason = getattr(exc, "reason", exc)
                raise FetchError(f"cannot reach {url} ({reason}); offline? set npm_config_registry") from exc
        time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def extract(package: Package, tarball: bytes) -> dict[str, bytes]:
    """The listed files of a verified tarball, by vendor name; raises FetchError."""
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
            for inner, name in package.files.items():
                try:
                    member = tar.getmember(f"package/{inner}")
                except KeyError:
                    raise FetchError(f"{package.name}@{package.version}: no {inner} in the tarball") from None
                fileobj = tar.extractfile(member) if member.isfile() else None
                if fileobj is None:
                    raise FetchError(f"{package.name}@{package.version}: {inner} is not a regular file")
                out[name] = fileobj.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise FetchError(f"{package.name}@{package.version}: unreadable tarball ({exc})") from exc
    return out


def _write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fetch_assets(dest: Path, registry: str, packages: tuple[Package, ...] = PACKAGES) -> list[str]:
    """Make ``dest`` hold the packages' files; returns the names written ([] when intact).

    Everything is downloaded and verified before the first file is written; the manifest is
    replaced last, so an interrupted run is detected (hash mismatch) and redone next time.
    Raises FetchError.
    """
    if is_intact(dest, packages):
        return []
    files: dict[str, bytes] = {}
    for package in packages:
        tarball = download(package.tarball_url(registry))
        try:
            verify_integrity(tarball, package.integrity)
        except FetchError as exc:
            raise FetchError(f"{package.name}@{package.version}: {exc}") from None
        files.update(extract(package, tarball))
    try:
        dest.mkdir(parents=True, exist_ok=True)
        (dest / MANIFEST).unlink(missing_ok=True)
        for name, data in files.items():
            _write_atomically(dest / name, data)
        manifest = json.dumps(_manifest(packages, files), indent=2) + "\n"
        _write_atomically(dest / MANIFEST, manifest.encode())
    except OSError as exc:
        raise FetchError(f"cannot write {dest}: {exc}") from exc
    return sorted(files)


def registry_from_env() -> str:
    """npm reads its config from the environment case-insensitively."""
    env = {k.lower(): v for k, v in os.environ.items()}
    return env.get("npm_config_registry") or DEFAULT_REGISTRY


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=DEST, help="target directory (default: static/vendor)")
    args = parser.parse_args(argv)
    try:
        written = fetch_assets(args.dest, registry_from_env())
    except FetchError as exc:
        print(f"fetch_webui_assets: error: {exc}", file=sys.stderr)
        return 1
    if written:
        print(f"fetch_webui_assets: wrote {', '.join(written)} to {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
