"""scripts/fetch_webui_assets.py against a loopback "registry" serving tarballs built here."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "fetch_webui_assets.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("fetch_webui_assets", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


fwa = _load_script()


def tarball(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def sri(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


class Registry:
    """A loopback HTTP server: ``routes`` maps a path to bytes; ``hits`` lists requested paths."""

    def __init__(self) -> None:
        self.routes: dict[str, bytes] = {}
        self.hits: list[str] = []
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                registry.hits.append(self.path)
                body = registry.routes.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("content-length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def registry() -> Iterator[Registry]:
    reg = Registry()
    try:
        yield reg
    finally:
        reg.close()


LIB = b"window.lib = 1;\n"
CSS = b".hljs{color:red}\n"


def publish(registry: Registry, lib: bytes = LIB, integrity_of: bytes | None = None) -> tuple:
    """Serve one scoped package; returns the pins (integrity of ``integrity_of`` if given)."""
    body = tarball({"dist/lib.min.js": lib, "styles/a.css": CSS, "other.js": b"not wanted"})
    registry.routes["/@scope/lib/-/lib-1.0.0.tgz"] = body
    pinned = (
        sri(tarball({"dist/lib.min.js": integrity_of, "styles/a.css": CSS})) if integrity_of else sri(body)
    )
    return (
        fwa.Package(
            "@scope/lib", "1.0.0", pinned, {"dist/lib.min.js": "lib.min.js", "styles/a.css": "a.css"}
        ),
    )


def test_fetch_verifies_extracts_only_listed_files_and_writes_a_manifest(registry: Registry, tmp_path: Path):
    packages = publish(registry)
    dest = tmp_path / "vendor"

    written = fwa.fetch_assets(dest, registry.url, packages)

    assert written == ["a.css", "lib.min.js"]
    assert (dest / "lib.min.js").read_bytes() == LIB and (dest / "a.css").read_bytes() == CSS
    assert sorted(p.name for p in dest.iterdir()) == ["a.css", "lib.min.js", "manifest.json"]
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["files"]["lib.min.js"] == hashlib.sha256(LIB).hexdigest()
    assert manifest["packages"] == [packages[0].pin]
    assert registry.hits == ["/@scope/lib/-/lib-1.0.0.tgz"]


def test_an_intact_vendor_dir_downloads_nothing_and_a_damaged_one_is_fetched_again(
    registry: Registry, tmp_path: Path
):
    packages = publish(registry)
    dest = tmp_path / "vendor"
    fwa.fetch_assets(dest, registry.url, packages)

    assert fwa.fetch_assets(dest, registry.url, packages) == []
    assert len(registry.hits) == 1

    (dest / "lib.min.js").write_bytes(b"tampered")
    assert fwa.fetch_assets(dest, registry.url, packages) == ["a.css", "lib.min.js"]
    assert (dest / "lib.min.js").read_bytes() == LIB and len(registry.hits) == 2


def test_a_hash_mismatch_is_refused_before_anything_is_written(registry: Registry, tmp_path: Path):
    packages = publish(registry, lib=b"window.evil = 1;\n", integrity_of=LIB)
    dest = tmp_path / "vendor"
    dest.mkdir()
    (dest / "lib.min.js").write_bytes(b"previous")

    with pytest.raises(fwa.FetchError, match="integrity mismatch"):
        fwa.fetch_assets(dest, registry.url, packages)

    assert sorted(p.name for p in dest.iterdir()) == ["lib.min.js"]
    assert (dest / "lib.min.js").read_bytes() == b"previous"


def test_a_file_missing_from_the_tarball_is_an_error(registry: Registry, tmp_path: Path):
    body = tarball({"README.md": b"x"})
    registry.routes["/lib/-/lib-2.0.0.tgz"] = body
    packages = (fwa.Package("lib", "2.0.0", sri(body), {"dist/lib.min.js": "lib.min.js"}),)

    with pytest.raises(fwa.FetchError, match="no dist/lib.min.js in the tarball"):
        fwa.fetch_assets(tmp_path / "vendor", registry.url, packages)
    assert not (tmp_path / "vendor").exists()


def run_cli(tmp_path: Path, registry_url: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k.lower() != "npm_config_registry"}
    env["npm_config_registry"] = registry_url
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--dest", str(tmp_path / "vendor")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_offline_exits_non_zero_with_one_line_and_writes_nothing(registry: Registry, tmp_path: Path):
    closed_url = registry.url
    registry.close()  # nothing listens on that port any more

    done = run_cli(tmp_path, closed_url)

    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fetch_webui_assets: error: cannot reach"), done.stderr
    assert not (tmp_path / "vendor").exists()


def test_the_real_pins_name_the_files_the_page_loads():
    names = sorted(n for p in fwa.PACKAGES for n in p.files.values())
    assert names == [
        "highlight.min.js",
        "hljs-dark.css",
        "hljs-light.css",
        "markdown-it.min.js",
        "purify.min.js",
    ]
    base = (REPO / "templates" / "base.html").read_text()
    assert all(f"vendor/{n}" in base for n in names)
    assert all(p.integrity.startswith("sha512-") for p in fwa.PACKAGES)
    assert fwa.PACKAGES[2].tarball_url("https://r.example/") == (
        "https://r.example/@highlightjs/cdn-assets/-/cdn-assets-11.12.0.tgz"
    )


def test_a_registry_404_is_a_clear_error(registry: Registry, tmp_path: Path):
    done = run_cli(tmp_path, registry.url)

    assert done.returncode == 1
    assert done.stderr.strip().endswith("HTTP 404 Not Found"), done.stderr
