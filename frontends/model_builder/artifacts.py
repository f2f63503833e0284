"""The on-disk form of compiled buckets and saved models: a zip archive whose
``manifest.json`` names the format, its version, and the SHA-256 of every member.

Reading checks all of it before anything is used: a file that is not such an archive, a
manifest of another format or version, a member missing, added or changed (a hash that does
not match) is an ``err_invalid_artifact`` naming the file and what is wrong, never a wrong
result."""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass
from typing import Any

from ..api_errors import bad_artifact

FORMAT_VERSION = 1

# what each kind of archive holds
NEFF = "nki-sim/compiled-bucket"  # one bucket: the graph, its kernels' IR, its cost estimate
MODEL = "nki-sim/nxd-model"  # a saved NxDModel: its buckets' archives, weights if saved


@dataclass(frozen=True)
class Bundle:
    """A read (and verified) archive: its manifest's metadata and its members' bytes."""

    kind: str
    meta: dict[str, Any]
    members: dict[str, bytes]

    def text(self, name: str) -> str:
        return self.members[name].decode()


def digest(data: bytes) -> str:
    """The SHA-256 of ``data`` (hex)."""
    return hashlib.sha256(data).hexdigest()


def pack(kind: str, meta: dict[str, Any], members: dict[str, bytes]) -> bytes:
    """The archive bytes of ``members`` with a manifest (``kind``, version, hashes, ``meta``)."""
    manifest = {
        "format": kind,
        "version": FORMAT_VERSION,
        "members": {name: digest(data) for name, data in sorted(members.items())},
        "meta": meta,
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        # a fixed timestamp: the same content gives the same bytes
        for name in ["manifest.json", *sorted(members)]:
            data = (
                json.dumps(manifest, indent=1).encode()
                if name == "manifest.json"
                else members[name]
            )
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def unpack(data: bytes, kind: str, where: str) -> Bundle:
    """Read and verify archive bytes (``where`` names the file in errors)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError) as e:
        raise bad_artifact(
            f"{where} is not an nki-sim {kind} archive (not a readable zip: {e})"
        ) from None
    files = {}
    with archive:
        for info in archive.infolist():
            try:
                files[info.filename] = archive.read(info)
            except Exception as e:  # CRC mismatch, truncated or garbled member
                raise bad_artifact(
                    f"{where} is corrupted: member {info.filename!r} cannot be read ({e})"
                ) from None
    try:
        manifest = json.loads(files.pop("manifest.json"))
        fmt, version, hashes = manifest["format"], manifest["version"], manifest["members"]
        meta = manifest["meta"]
    except (KeyError, TypeError, ValueError):
        raise bad_artifact(
            f"{where} has no readable manifest.json: not an nki-sim {kind} "
            "archive, or a corrupted one"
        ) from None
    if fmt != kind:
        raise bad_artifact(f"{where} holds a {fmt!r} archive, expected {kind!r}")
    if version != FORMAT_VERSION:
        raise bad_artifact(
            f"{where} is format version {version}; this nki-sim reads version "
            f"{FORMAT_VERSION} (save it again with this version)"
        )
    if set(files) != set(hashes):
        extra, missing = set(files) - set(hashes), set(hashes) - set(files)
        raise bad_artifact(
            f"{where}: members do not match the manifest (missing "
            f"{sorted(missing)}, not listed {sorted(extra)})"
        )
    for name, data in files.items():
        if digest(data) != hashes[name]:
            raise bad_artifact(
                f"{where}: member {name!r} is corrupted (its SHA-256 is not the "
                "one recorded when it was written)"
            )
    return Bundle(fmt, meta, files)


def read(path: str | os.PathLike, kind: str) -> Bundle:
    """Read and verify the archive at ``path``."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise bad_artifact(f"cannot read {os.fspath(path)!r}: {e.strerror}") from None
    return unpack(data, kind, repr(os.fspath(path)))


def write(path: str | os.PathLike, data: bytes) -> None:
    """Write archive bytes atomically (a reader never sees half a file)."""
    tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)
