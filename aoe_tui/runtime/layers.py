"""Per-arena image layers: an arena package's territory recipe built on the guest image.

A package with a ``territory/`` recipe (:mod:`aoe_tui.domain.recipe`,
``docs/arena-packages.md``) gets an **image layer** built once on top of the base guest
image (:mod:`aoe_tui.runtime.image`) and cached under
``<image_root()>/layers/<package>-<key>/`` where ``key`` hashes the base image's key and
the recipe (:func:`aoe_tui.domain.recipe.recipe_digest`): a changed recipe or base builds
anew, an unchanged one is reused. Two forms, one per provider family:

* ``upper/`` — an overlayfs upper tree (files, folders, symlinks, whiteouts) made by
  applying the recipe on an overlay of the base ``rootfs``. Container territories mount
  ``lowerdir=<upper>:<base rootfs>`` under their own writable layer;
* ``layer.qcow2`` — a qcow2 whose backing file is the base ``base.qcow2``, holding only
  the clusters the recipe changed. Built on first use by a QEMU territory
  (:func:`ensure_layer_qcow2`), without mounting anything: the base disk is expanded to a
  raw file, ``upper/`` is written into it with ``debugfs`` and checked with ``e2fsck``,
  and the changed clusters are written into the new qcow2 with ``qemu-io``. Each VM's
  overlay is backed by it.

Builds run in a temporary folder renamed into place, under the image build lock, so two
processes never build the same layer and a killed build leaves nothing used. A package
without a recipe runs on the plain guest (:func:`image_for_arena` returns the base).

Needs root, overlayfs and ``chroot`` for a layer; ``qemu-img`` and ``qemu-io``
(qemu-utils), ``debugfs`` and ``e2fsck`` (e2fsprogs) for its qcow2 form.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aoe_tui.domain.recipe import LoadedRecipe, RecipeError, find_recipe, load_recipe, recipe_digest
from aoe_tui.fsio import SubPath, mount_points, write_atomic
from aoe_tui.runtime.image import (
    GuestImage,
    ImageBuildError,
    ProgressFn,
    _build_lock,
    _need,
    ensure_image,
    find_image,
    image_root,
    require_image,
    safe_rmtree,
)
from aoe_tui.runtime.provider import ProviderError

__all__ = [
    "ArenaLayer",
    "LayerMissingError",
    "apply_upper",
    "ensure_layer",
    "ensure_layer_qcow2",
    "find_layer",
    "image_for_arena",
    "layer_root",
]

#: Bump when the way a layer is built changes in a way the recipe does not show.
LAYER_FORMAT = 1


class LayerMissingError(ProviderError):
    """The arena's image layer is not built; the message names the command that builds it."""


@dataclass(frozen=True)
class ArenaLayer:
    """A built (or planned) arena layer.

    Attributes:
        name: the package folder's name (``durable-job-queue``).
        key: 16 hex characters of sha256(layer format, base image key, recipe digest).
        root: ``<image_root()>/layers/<name>-<key>``.
        base: the guest image the layer sits on.
        recipe: the checked recipe it is built from.
    """

    name: str
    key: str
    root: Path
    base: GuestImage
    recipe: LoadedRecipe

    upper = SubPath("root", "upper", "The overlay upper tree (container territories' middle layer).")
    qcow2 = SubPath("root", "layer.qcow2", "``layer.qcow2``, backed by the base ``base.qcow2`` (QEMU territories).")

    def built(self) -> bool:
        """True when ``upper/`` and ``layer.json`` exist (the container form is complete)."""
        return (self.root / "layer.json").is_file() and self.upper.is_dir()

    def image(self, *, qemu: bool = False) -> GuestImage:
        """The :class:`GuestImage` territories boot: the base image with this layer's
        ``upper/`` as lower layer (containers) or ``layer.qcow2`` as disk (``qemu``)."""
        img = dataclasses.replace(self.base, layers=(self.upper,), arena=self.name, key=self.key)
        if qemu:
            img = dataclasses.replace(img, qcow2=self.qcow2)
        return img


def layer_root() -> Path:
    """Folder holding every built layer: ``<image_root()>/layers``."""
    return image_root() / "layers"


def _safe_name(package_dir: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(package_dir).resolve().name).strip("-.")
    return name or "arena"


def _plan(package_dir: Path, base: GuestImage | None) -> ArenaLayer | None:
    """The layer a package would use (built or not), or None for a package without recipe.

    Raises:
        RecipeError: the recipe has problems.
        ImageMissingError: ``base`` is None and the base image is not built.
    """
    root = find_recipe(package_dir)
    if root is None:
        return None
    loaded = load_recipe(root)
    base = base or require_image()
    import hashlib

    key = hashlib.sha256(f"{LAYER_FORMAT}\0{base.key}\0{recipe_digest(loaded)}".encode()).hexdigest()[:16]
    name = _safe_name(package_dir)
    return ArenaLayer(name=name, key=key, root=layer_root() / f"{name}-{key}", base=base, recipe=loaded)


def find_layer(package_dir: Path, base: GuestImage | None = None) -> ArenaLayer | None:
    """The package's built layer for the current recipe and base, or None (not built, or no
    recipe). Raises :class:`RecipeError` for a broken recipe and ``ImageMissingError`` when
    the base image is missing."""
    layer = _plan(package_dir, base)
    return layer if layer is not None and layer.built() else None


def ensure_layer(package_dir: Path, progress: ProgressFn | None = None, *, base: GuestImage | None = None,
                 force: bool = False) -> ArenaLayer | None:
    """The package's layer, built first when missing (or ``force``); None without a recipe.

    ``progress(stage_label, fraction)`` is called during a build (fraction 0..1). Builds
    the base guest image first if it is missing. Concurrent callers serialize on the image
    build lock; later ones reuse the result.

    Raises:
        RecipeError: the recipe has problems (every one listed).
        ImageBuildError: a tool is missing or a build step failed (one line).
    """
    cb = progress or (lambda _l, _f: None)
    if find_recipe(package_dir) is None:
        return None
    if base is None:
        base = find_image() or ensure_image(progress=lambda label, f: cb(f"guest image: {label}", f * 0.8))
    layer = _plan(package_dir, base)
    assert layer is not None
    if layer.built() and not force:
        return layer
    with _build_lock():
        if layer.built() and not force:
            cb("cached", 1.0)
            return layer
        _build_layer(layer, cb)
    return layer


def image_for_arena(package_dir: Path, *, qemu: bool = False, progress: ProgressFn | None = None,
                    build: bool = True) -> GuestImage:
    """The guest image territories of this arena boot: the base image, or the base with the
    package's layer (built when missing and ``build``; for ``qemu`` its qcow2 form too).

    Raises:
        ImageMissingError / LayerMissingError: not built and ``build`` is False (the message
            names ``aoe image build``).
        RecipeError, ImageBuildError: see :func:`ensure_layer`.
    """
    package_dir = Path(package_dir)
    if find_recipe(package_dir) is None:
        return ensure_image(progress=progress) if build else require_image()
    if build:
        layer = ensure_layer(package_dir, progress)
        assert layer is not None
        if qemu:
            ensure_layer_qcow2(layer, progress)
        return layer.image(qemu=qemu)
    layer = _plan(package_dir, None)
    assert layer is not None
    if not layer.built() or (qemu and not layer.qcow2.is_file()):
        raise LayerMissingError(f"territory image layer of arena {package_dir} is not built; build it with: "
                                f"aoe image build --arena {package_dir}")
    return layer.image(qemu=qemu)


# ----------------------------------------------------------------------- building


def _run(argv: list[str], log: Path, *, stdin: Path | None = None, timeout_s: float = 600) -> None:
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(argv)}\n")
        fh.flush()
        src = open(stdin, "rb") if stdin else subprocess.DEVNULL
        try:
            res = subprocess.run(argv, stdin=src, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout_s,
                                 env=dict(os.environ, LC_ALL="C", DEBIAN_FRONTEND="noninteractive"))
        except subprocess.TimeoutExpired:
            raise ImageBuildError(f"layer build step {Path(argv[0]).name} hung for {timeout_s:.0f} s; log {log}") from None
        finally:
            if stdin:
                src.close()  # type: ignore[union-attr]
    if res.returncode != 0:
        tail = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-3:]
        raise ImageBuildError(f"layer build step {Path(argv[0]).name} failed (exit {res.returncode}); log {log}: "
                              + " | ".join(tail))


@contextlib.contextmanager
def _overlay(lower: Path, upper: Path, work: Path, merged: Path, log: Path) -> Iterator[None]:
    """Mount ``merged`` = overlay(lower, upper); plain features only (no redirects,
    metacopy or index), so ``upper`` is a portable layer. Always unmounted on exit."""
    base_opts = f"lowerdir={lower},upperdir={upper},workdir={work}"
    for extra in (",redirect_dir=off,index=off,metacopy=off", ",redirect_dir=off,index=off", ""):
        res = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", base_opts + extra, str(merged)],
                             capture_output=True, text=True)
        if res.returncode == 0:
            break
    else:
        raise ImageBuildError(f"arena layers need overlayfs: mount failed: {res.stderr.strip()[:200]} "
                              "(try: modprobe overlay; see aoe doctor)")
    try:
        yield
    finally:
        subprocess.run(["umount", str(merged)], capture_output=True)
        if str(merged) in mount_points():
            subprocess.run(["umount", "-l", str(merged)], capture_output=True)


@contextlib.contextmanager
def _chroot_binds(root: Path) -> Iterator[None]:
    done: list[Path] = []
    try:
        for m in ("proc", "sys", "dev"):
            target = root / m
            target.mkdir(exist_ok=True)
            subprocess.run(["mount", "--bind", f"/{m}", str(target)], check=True, capture_output=True)
            done.append(target)
        yield
    except subprocess.CalledProcessError as err:
        raise ImageBuildError(f"cannot bind-mount /{Path(err.cmd[-1]).name} into the layer: "
                              f"{(err.stderr or b'').decode(errors='replace').strip()[:200]}") from None
    finally:
        for target in reversed(done):
            if subprocess.run(["umount", str(target)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(target)], capture_output=True)


def _copy_files(recipe: LoadedRecipe, dest: Path) -> int:
    """Copy ``files/`` into ``dest`` (the merged layer root), root-owned, with recipe
    modes; returns the number of paths copied."""
    src_root = recipe.files
    if not src_root.is_dir():
        return 0
    n = 0
    for dirpath, dirnames, filenames in os.walk(src_root):
        dirnames.sort()
        base = Path(dirpath)
        rel_dir = base.relative_to(src_root)
        for name in dirnames + sorted(filenames):
            src = base / name
            rel = (rel_dir / name).as_posix()
            target = dest / rel
            st = src.lstat()
            if stat.S_ISDIR(st.st_mode):
                if target.is_symlink() or (target.exists() and not target.is_dir()):
                    target.unlink()
                target.mkdir(exist_ok=True)
            elif stat.S_ISLNK(st.st_mode):
                if target.is_symlink() or target.exists():
                    if target.is_dir() and not target.is_symlink():
                        shutil.rmtree(target)
                    else:
                        target.unlink()
                os.symlink(os.readlink(src), target)
                os.lchown(target, 0, 0)
                n += 1
                continue
            else:
                if target.is_symlink() or target.is_file():
                    target.unlink()
                shutil.copyfile(src, target)
            os.chown(target, 0, 0)
            os.chmod(target, recipe.mode_of(rel, src))
            n += 1
    return n


def _remove(recipe: LoadedRecipe, merged: Path) -> None:
    for guest in recipe.recipe.remove:
        p = merged / guest.lstrip("/")
        if p.is_symlink() or p.is_file():
            p.unlink()
        elif p.is_dir():
            shutil.rmtree(p)


def _sweep_stale_builds() -> list[str]:
    """Remove the temporary folders of layer builds whose process is gone (a killed build
    can leave its overlay and the chroot's /proc, /sys and /dev mounted there:
    :func:`safe_rmtree` unmounts before it deletes). Call with the build lock held.
    Returns the folders removed."""
    removed: list[str] = []
    for d in [*layer_root().glob(".build-*"), *layer_root().glob("*/.qcow2-build-*")]:
        m = re.search(r"-(\d+)$", d.name)
        if m is None or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            pass  # its builder is gone
        except OSError:
            continue  # alive (another user's) or unknowable: leave it
        else:
            continue  # its builder is alive
        with contextlib.suppress(ProviderError):
            safe_rmtree(d)
            removed.append(str(d))
    return removed


def _build_layer(layer: ArenaLayer, progress: ProgressFn) -> None:
    _sweep_stale_builds()
    if os.geteuid() != 0:
        raise ImageBuildError(f"building the image layer of {layer.name} needs root (overlayfs, chroot); "
                              f"run `sudo aoe image build --arena PATH`")
    _need("chroot", "coreutils")
    root = layer_root()
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".build-{layer.name}-{layer.key}-{os.getpid()}"
    safe_rmtree(tmp)
    (tmp / "upper").mkdir(parents=True)
    (tmp / "work").mkdir()
    (tmp / "merged").mkdir()
    os.chmod(tmp / "upper", 0o755)
    log = tmp / "build.log"
    log.touch()
    t0 = time.monotonic()
    try:
        progress(f"layer {layer.name}: mounting", 0.82)
        merged = tmp / "merged"
        with _overlay(layer.base.rootfs, tmp / "upper", tmp / "work", merged, log):
            progress(f"layer {layer.name}: copying files", 0.85)
            copied = _copy_files(layer.recipe, merged)
            _remove(layer.recipe, merged)
            units = layer.recipe.recipe.enable
            script = layer.recipe.setup_script
            if units or script is not None:
                with _chroot_binds(merged):
                    if units:
                        progress(f"layer {layer.name}: enabling units", 0.9)
                        _run(["chroot", str(merged), "systemctl", "enable", *units], log)
                    if script is not None:
                        progress(f"layer {layer.name}: running {script.name}", 0.93)
                        _run(["chroot", str(merged), "/bin/bash", "-s"], log, stdin=script)
        safe_rmtree(tmp / "work")
        (tmp / "merged").rmdir()
        meta = {"schema": "aoe-tui.arena-layer", "format": LAYER_FORMAT, "name": layer.name, "key": layer.key,
                "base_key": layer.base.key, "description": layer.recipe.recipe.description,
                "files_copied": copied, "build_s": round(time.monotonic() - t0, 3),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        write_atomic(tmp / "layer.json", json.dumps(meta, indent=2) + "\n", durable_dir=False)
        final = layer.root
        if final.exists():
            trash = root / f".old-{final.name}-{os.getpid()}"
            os.rename(final, trash)
            safe_rmtree(trash)
        os.rename(tmp, final)
        progress(f"layer {layer.name}: done", 1.0)
    except BaseException:
        with contextlib.suppress(ProviderError):
            safe_rmtree(tmp)
        raise


# ----------------------------------------------------------------------- applying an upper tree


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 0 and os.minor(st.st_rdev) == 0


def _is_opaque(path: Path) -> bool:
    try:
        return os.getxattr(path, "trusted.overlay.opaque", follow_symlinks=False) == b"y"
    except OSError:
        return False


def _walk_upper(upper: Path) -> Iterator[tuple[str, Path, os.stat_result]]:
    """``(relative posix path, path, lstat)`` of every entry of ``upper``, parents first."""
    for dirpath, dirnames, filenames in os.walk(upper):
        dirnames.sort()
        base = Path(dirpath)
        for name in dirnames + sorted(filenames):
            p = base / name
            yield p.relative_to(upper).as_posix(), p, p.lstat()


def apply_upper(upper: Path, dest: Path) -> None:
    """Apply an overlay upper tree to a full copy of the lower tree at ``dest`` (the
    container provider's fallback when overlayfs is unusable): whiteouts delete, opaque
    folders replace, everything else is copied with its owner and mode."""
    for rel, src, st in _walk_upper(upper):
        target = dest / rel
        if _is_whiteout(st):
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.is_symlink() or target.exists():
                target.unlink()
            continue
        if stat.S_ISDIR(st.st_mode):
            if _is_opaque(src) and target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            if target.is_symlink() or (target.exists() and not target.is_dir()):
                target.unlink()
            target.mkdir(exist_ok=True)
        else:
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.is_symlink() or target.exists():
                target.unlink()
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(src), target)
            else:
                shutil.copyfile(src, target)
        os.lchown(target, st.st_uid, st.st_gid)
        if not stat.S_ISLNK(st.st_mode):
            os.chmod(target, stat.S_IMODE(st.st_mode))


# ----------------------------------------------------------------------- qcow2 form

_UNSAFE = re.compile(r'["\\\x00-\x1f\x7f]')


def _arg(text: str, what: str) -> str:
    """One debugfs argument, double-quoted (its parser keeps spaces and brackets inside
    quotes); a ``"``, a backslash or a control character cannot be written."""
    if _UNSAFE.search(text):
        raise ImageBuildError(f"{what} {text!r} has characters the qcow2 layer builder cannot write")
    return f'"{text}"'


def _debugfs_script(upper: Path, base_rootfs: Path) -> list[str]:
    """debugfs commands that turn the base filesystem into base + ``upper``."""
    cmds: list[str] = []

    def q(rel: str) -> str:
        return _arg("/" + rel, "layer path")

    def owner_mode(rel: str, kind: int, st: os.stat_result) -> list[str]:
        return [f"sif {q(rel)} mode 0{kind | stat.S_IMODE(st.st_mode):o}", f"sif {q(rel)} uid {st.st_uid}",
                f"sif {q(rel)} gid {st.st_gid}"]

    def remove_base(rel: str) -> None:
        """Delete ``rel`` as it is in the base (recursively, deepest first)."""
        p = base_rootfs / rel
        if p.is_dir() and not p.is_symlink():
            for child in sorted(p.iterdir(), reverse=True):
                remove_base(child.relative_to(base_rootfs).as_posix())
            cmds.append(f"rmdir {q(rel)}")
        elif p.is_symlink() or p.exists():
            cmds.append(f"rm {q(rel)}")

    removed: set[str] = set()
    for rel, src, st in _walk_upper(upper):
        parent, name = (rel.rsplit("/", 1) if "/" in rel else ("", rel))
        in_base = os.path.lexists(base_rootfs / rel) and not any(rel.startswith(r + "/") for r in removed)
        if _is_whiteout(st):
            if in_base:
                remove_base(rel)
                removed.add(rel)
            continue
        if stat.S_ISDIR(st.st_mode):
            base_is_dir = in_base and (base_rootfs / rel).is_dir() and not (base_rootfs / rel).is_symlink()
            if in_base and (not base_is_dir or _is_opaque(src)):
                remove_base(rel)
                removed.add(rel)
                base_is_dir = False
            if not base_is_dir:
                cmds += [f"cd {q(parent)}", f"mkdir {_arg(name, 'layer path')}"]
            cmds += owner_mode(rel, stat.S_IFDIR, st)
            continue
        if in_base:
            remove_base(rel)
            removed.add(rel)
        cmds.append(f"cd {q(parent)}")
        if stat.S_ISLNK(st.st_mode):
            cmds.append(f"symlink {_arg(name, 'layer path')} {_arg(os.readlink(src), 'layer symlink target')}")
            continue
        if not stat.S_ISREG(st.st_mode):
            raise ImageBuildError(f"layer entry {rel} is neither a file, a folder nor a symlink")
        cmds += [f"write {_arg(str(src), 'layer cache path')} {_arg(name, 'layer path')}",
                 *owner_mode(rel, stat.S_IFREG, st)]
    return cmds


#: granularity of the disk comparison (bytes; the qcow2 cluster size)
_CLUSTER = 64 * 1024


def _diff_runs(old: Path, new: Path) -> Iterator[tuple[int, int]]:
    """``(offset, length)`` byte runs (cluster aligned, adjacent ones merged) where ``new``
    differs from ``old`` (two raw disks of one size)."""
    start = -1
    off = 0
    with open(old, "rb") as fo, open(new, "rb") as fn:
        while True:
            a = fo.read(_CLUSTER * 16)
            b = fn.read(_CLUSTER * 16)
            if not b:
                break
            if a == b:
                if start >= 0:
                    yield start, off - start
                    start = -1
                off += len(b)
                continue
            for i in range(0, len(b), _CLUSTER):
                same = a[i:i + _CLUSTER] == b[i:i + _CLUSTER]
                if not same and start < 0:
                    start = off + i
                elif same and start >= 0:
                    yield start, off + i - start
                    start = -1
            off += len(b)
    if start >= 0:
        yield start, off - start


def ensure_layer_qcow2(layer: ArenaLayer, progress: ProgressFn | None = None) -> Path:
    """``layer.qcow2`` for QEMU territories, built from ``upper/`` on first use.

    The base disk is expanded to raw twice; ``upper/`` is written into one copy with
    ``debugfs`` and checked with ``e2fsck``; the clusters that differ are written with
    ``qemu-io`` into a qcow2 whose backing file is the base disk; ``qemu-img compare``
    then proves that qcow2 reads exactly as the modified disk.

    Raises:
        ImageBuildError: a tool is missing or a step failed (names the build log).
    """
    if layer.qcow2.is_file():
        return layer.qcow2
    cb = progress or (lambda _l, _f: None)
    with _build_lock():
        if layer.qcow2.is_file():
            return layer.qcow2
        _sweep_stale_builds()
        qemu_img = _need("qemu-img", "qemu-utils")
        qemu_io = _need("qemu-io", "qemu-utils")
        debugfs = _need("debugfs", "e2fsprogs")
        e2fsck = _need("e2fsck", "e2fsprogs")
        tmp = layer.root / f".qcow2-build-{os.getpid()}"
        safe_rmtree(tmp)
        tmp.mkdir()
        log = tmp / "build.log"
        log.touch()
        base_qcow2 = str(Path(layer.base.qcow2).resolve())
        try:
            cb(f"layer {layer.name}: expanding base disk", 0.2)
            base_raw, raw = tmp / "base.raw", tmp / "disk.raw"
            _run([qemu_img, "convert", "-O", "raw", base_qcow2, str(base_raw)], log)
            _run([qemu_img, "convert", "-O", "raw", base_qcow2, str(raw)], log)
            cb(f"layer {layer.name}: writing layer into disk", 0.4)
            script = tmp / "debugfs.cmds"
            script.write_text("\n".join(_debugfs_script(layer.upper, layer.base.rootfs)) + "\n")
            _run([debugfs, "-w", "-f", str(script), str(raw)], log)
            bad = [ln for ln in log.read_text(errors="replace").splitlines()
                   if re.match(r"^(debugfs|\w+): ", ln) and ("rror" in ln or "not found" in ln or "exists" in ln)]
            if bad:
                raise ImageBuildError(f"writing the layer of {layer.name} into its disk failed: {bad[0][:200]}; log {log}")
            cb(f"layer {layer.name}: checking filesystem", 0.55)
            _run([e2fsck, "-f", "-n", str(raw)], log)
            cb(f"layer {layer.name}: comparing with the base disk", 0.65)
            out = tmp / "layer.qcow2"
            _run([qemu_img, "create", "-q", "-f", "qcow2", "-b", base_qcow2, "-F", "qcow2", str(out)], log)
            cmds = []
            with open(raw, "rb") as fh:
                for n, (offset, length) in enumerate(_diff_runs(base_raw, raw)):
                    fh.seek(offset)
                    data = fh.read(length)
                    if not data.strip(b"\0"):
                        cmds.append(f"write -q -z {offset} {length}")
                        continue
                    chunk = tmp / f"run-{n}.bin"
                    chunk.write_bytes(data)
                    cmds.append(f"write -q -s {chunk} {offset} {length}")
            base_raw.unlink()
            cb(f"layer {layer.name}: writing {len(cmds)} changed runs", 0.8)
            cmd_file = tmp / "qemu-io.cmds"
            cmd_file.write_text("\n".join(cmds + ["quit"]) + "\n")
            _run([qemu_io, "-f", "qcow2", str(out)], log, stdin=cmd_file)
            cb(f"layer {layer.name}: verifying", 0.9)
            _run([qemu_img, "compare", "-q", "-f", "raw", "-F", "qcow2", str(raw), str(out)], log)
            os.chmod(out, 0o444)
            os.rename(out, layer.qcow2)
            cb(f"layer {layer.name}: done", 1.0)
        finally:
            with contextlib.suppress(ProviderError):
                safe_rmtree(tmp)
    return layer.qcow2


__all__ += ["RecipeError"]
