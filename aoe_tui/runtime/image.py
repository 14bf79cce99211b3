"""The territory guest image: a Debian root filesystem built from Debian packages.

One build produces everything both local providers need (spec §6, guest contract of
issue 3; the build steps are below and in ``guest/customize.sh``):

* ``rootfs/``: the root filesystem tree (container territories mount it read-only as the
  lower layer of a per-territory overlay),
* ``base.qcow2``: a 2 GiB ext4 disk of that tree (no partition table, root = ``/dev/vda``),
* ``boot/vmlinuz`` + ``boot/initrd.img``: the kernel and initrd for QEMU's ``-kernel``.

Builds live in ``platformdirs.user_cache_dir("aoe-tui")/images/<arena>-<key>/`` where
``key`` hashes the recipe (suite, package list, customize script, format version), so a
changed recipe builds anew and an unchanged one is reused. A build runs in a temporary
folder that is renamed into place atomically, under an ``fcntl`` lock so two processes
never build at once (the second waits and then reuses the first one's result). The
debootstrap ``.deb`` cache is kept in ``<cache>/debootstrap-debs`` so rebuilds do not
download again.

Identity (hostname = territory id, root password from the territory's credentials) is
*not* baked in: QEMU guests apply it on first boot with ``aoe-identity.service`` from
fw_cfg files ``opt/aoe/hostname`` / ``opt/aoe/root_password`` (preferred, not visible in
``ps``) or the kernel command line ``aoe.hostname=`` / ``aoe.root_password=``; container
territories get it written into their own copy-on-write layer before boot.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from aoe_tui.fsio import mount_points
from aoe_tui.runtime.provider import ProviderError

#: Bump when the layout or the build steps change in a way the recipe text does not show.
FORMAT_VERSION = 1
#: Debian suite of the guest.
SUITE = "bookworm"
#: Default Debian mirror (override with the ``AOE_DEBIAN_MIRROR`` environment variable).
DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: Size of the ext4 filesystem inside ``base.qcow2`` (mkfs size argument).
DISK_SIZE = "2048M"
#: Packages installed on top of debootstrap's ``minbase`` variant (guest contract, issue 3).
PACKAGES: tuple[str, ...] = (
    "systemd-sysv", "udev", "dbus", "libpam-systemd", "openssh-server",
    "linux-image-amd64", "initramfs-tools", "zstd", "iproute2",
    "curl", "jq", "lsof", "procps", "python3", "sqlite3", "strace", "vim", "less",
)
#: Arenas that have a guest recipe (all share the first-build guest for now).
KNOWN_ARENAS: tuple[str, ...] = ("first-build",)
#: The command that builds the image, quoted in every "missing image" message.
BUILD_COMMAND = "aoe image build"

ProgressFn = Callable[[str, float], None]


class ImageMissingError(ProviderError):
    """The guest image is not built yet; the message names the command that builds it."""


class ImageBuildError(ProviderError):
    """Building the guest image failed (missing tool, debootstrap/mkfs failure); one line."""


@dataclass(frozen=True)
class GuestImage:
    """A built territory guest image.

    Attributes:
        key: recipe hash (:func:`recipe_key`), 16 hex characters.
        root: the image folder ``<image_root()>/<arena>-<key>``.
        rootfs: root filesystem tree (read-only lower layer for container territories).
        qcow2: ``base.qcow2`` disk (2 GiB virtual, ext4 on the whole disk; keep read-only,
            give each VM its own ``qemu-img create -b`` overlay).
        kernel: ``boot/vmlinuz`` for QEMU ``-kernel``.
        initrd: ``boot/initrd.img`` for QEMU ``-initrd``.
        layers: arena image layers above ``rootfs``, topmost first (overlay upper trees of
            :mod:`aoe_tui.runtime.layers`); empty for the plain guest. With a layer, ``key``
            is the layer's key and ``qcow2`` may be the layer's qcow2 (backed by the base).
        arena: the arena (package folder name) the image is for.
    """

    key: str
    root: Path
    rootfs: Path
    qcow2: Path
    kernel: Path
    initrd: Path
    layers: tuple[Path, ...] = ()
    arena: str = "first-build"


def cache_root() -> Path:
    """``platformdirs.user_cache_dir("aoe-tui")`` (holds ``images/`` and the .deb cache)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("aoe-tui"))


def image_root() -> Path:
    """Folder that holds every built image: ``user_cache_dir("aoe-tui")/images``."""
    return cache_root() / "images"


def customize_script() -> Path:
    """Path of the shipped customize script (package data ``aoe_tui/runtime/guest/customize.sh``)."""
    return Path(str(resources.files("aoe_tui.runtime.guest").joinpath("customize.sh")))


def _check_arena(arena: str) -> None:
    if arena not in KNOWN_ARENAS:
        raise ProviderError(
            f"no guest image recipe for arena {arena!r} (known: {', '.join(KNOWN_ARENAS)})"
        )


def recipe_key(arena: str = "first-build", with_opencode: bool = False) -> str:
    """Hash (16 hex chars) of the guest recipe: format version, suite, packages, customize script.

    ``with_opencode`` is part of the key for the future opencode-carrying variant.

    Raises:
        ProviderError: unknown ``arena``.
    """
    _check_arena(arena)
    recipe = {
        "format": FORMAT_VERSION,
        "suite": SUITE,
        "variant": "minbase",
        "packages": sorted(PACKAGES),
        "disk_size": DISK_SIZE,
        "customize": customize_script().read_text(),
        "with_opencode": with_opencode,
    }
    blob = json.dumps(recipe, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _image_from_dir(root: Path, key: str) -> GuestImage:
    return GuestImage(
        key=key,
        root=root,
        rootfs=root / "rootfs",
        qcow2=root / "base.qcow2",
        kernel=root / "boot" / "vmlinuz",
        initrd=root / "boot" / "initrd.img",
    )


def _is_complete(img: GuestImage) -> bool:
    return (
        (img.root / "image.json").is_file()
        and os.path.lexists(img.rootfs / "sbin" / "init")
        and img.qcow2.is_file()
        and img.kernel.is_file()
        and img.initrd.is_file()
    )


def find_image(arena: str = "first-build") -> GuestImage | None:
    """Return the built image for the current recipe of ``arena``, or ``None`` if not built.

    Raises:
        ProviderError: unknown ``arena``.
    """
    key = recipe_key(arena)
    img = _image_from_dir(image_root() / f"{arena}-{key}", key)
    return img if _is_complete(img) else None


def require_image(arena: str = "first-build") -> GuestImage:
    """Return the built image or raise :class:`ImageMissingError` naming ``aoe image build``."""
    img = find_image(arena)
    if img is None:
        suffix = "" if arena == "first-build" else f" --arena {arena}"
        raise ImageMissingError(
            f"territory guest image for arena {arena!r} is not built "
            f"(expected under {image_root()}); build it with: {BUILD_COMMAND}{suffix}"
        )
    return img


# ----------------------------------------------------------------------------- helpers


def _mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` (deepest first), from /proc/self/mountinfo."""
    prefix = str(path.resolve())
    found = [mp for mp in mount_points() if mp == prefix or mp.startswith(prefix + "/")]
    return sorted(set(found), key=len, reverse=True)


def safe_rmtree(path: Path) -> None:
    """Remove ``path`` recursively after unmounting anything mounted below it.

    Refuses (raises :class:`ProviderError`) if a mount below ``path`` cannot be removed:
    deleting through a bind mount of ``/dev`` or ``/proc`` would damage the host.
    """
    if not path.exists() and not path.is_symlink():
        return
    for mp in _mounts_under(path):
        subprocess.run(["umount", mp], capture_output=True)
    left = _mounts_under(path)
    for mp in left:
        subprocess.run(["umount", "-l", mp], capture_output=True)
    left = _mounts_under(path)
    if left:
        raise ProviderError(f"cannot remove {path}: still mounted: {', '.join(left)}")
    shutil.rmtree(path, ignore_errors=True)


def image_users(img: GuestImage) -> list[str]:
    """Mount points of overlays that use ``img.rootfs`` (or one of ``img.layers``) as a lower
    layer: running territories, also those of arena layers stacked on this image."""
    wanted = {str(img.rootfs), *(str(p) for p in img.layers)}
    users: list[str] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            opts = line.split(" - ", 1)[-1]
            for o in opts.split(","):
                if o.startswith("lowerdir=") and wanted & set(o[len("lowerdir="):].split(":")):
                    users.append(line.split()[4])
                    break
    return users


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    image_root().mkdir(parents=True, exist_ok=True)
    fd = os.open(image_root() / ".build.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


_DEBOOTSTRAP_STAGES: tuple[tuple[str, str, float], ...] = (
    # (regex on an "I: ..." line, label, fraction of the whole build when seen)
    (r"^I: Retrieving (InRelease|Release)", "fetching package index", 0.01),
    (r"^I: Retrieving Packages", "fetching package index", 0.02),
    (r"^I: Resolving dependencies", "resolving dependencies", 0.04),
    (r"^I: Checking component", "resolving dependencies", 0.05),
    (r"^I: Retrieving ", "downloading packages", 0.05),
    (r"^I: Validating ", "downloading packages", 0.05),
    (r"^I: Extracting ", "extracting packages", 0.20),
    (r"^I: Installing core packages", "installing core packages", 0.25),
    (r"^I: Unpacking required packages", "unpacking required packages", 0.30),
    (r"^I: Configuring required packages", "configuring required packages", 0.40),
    (r"^I: Unpacking the base system", "unpacking base system", 0.50),
    (r"^I: Unpacking ", "unpacking base system", 0.50),
    (r"^I: Configuring the base system", "configuring base system", 0.62),
    (r"^I: Configuring ", "configuring base system", 0.62),
    (r"^I: Base system installed successfully", "base system installed", 0.85),
)


def _run_logged(
    argv: list[str],
    log: Path,
    on_line: Callable[[str], None] | None = None,
    env: dict[str, str] | None = None,
) -> None:
    """Run ``argv``, appending its output to ``log``; raise ImageBuildError with the log tail."""
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(argv)}\n")
        fh.flush()
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, errors="replace", env=env, start_new_session=True,
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                fh.write(line)
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            rc = proc.wait()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
            raise
    if rc != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-3:]
        raise ImageBuildError(
            f"guest image build step {Path(argv[0]).name} failed (exit {rc}); log {log}: "
            + " | ".join(t.strip() for t in tail)
        )


def _need(tool: str, package: str) -> str:
    path = shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if path is None:
        raise ImageBuildError(
            f"{tool} not found (needed to build the guest image); install it with: "
            f"apt-get install -y {package}"
        )
    return path


def _build(arena: str, key: str, final: Path, progress: ProgressFn) -> None:
    if os.geteuid() != 0:
        raise ImageBuildError(f"building the guest image needs root (debootstrap, chroot); run `sudo {BUILD_COMMAND}`")
    debootstrap = _need("debootstrap", "debootstrap")
    mkfs = _need("mkfs.ext4", "e2fsprogs")
    qemu_img = _need("qemu-img", "qemu-utils")
    root = image_root()
    tmp = root / f".build-{arena}-{key}-{os.getpid()}"
    safe_rmtree(tmp)
    tmp.mkdir(parents=True)
    log = tmp / "build.log"
    debs = cache_root() / "debootstrap-debs"
    debs.mkdir(parents=True, exist_ok=True)
    mirror = os.environ.get("AOE_DEBIAN_MIRROR", DEFAULT_MIRROR)
    try:
        progress("debootstrap", 0.0)
        n_retrieved = 0

        def on_line(line: str) -> None:
            nonlocal n_retrieved
            for pattern, label, frac in _DEBOOTSTRAP_STAGES:
                if re.match(pattern, line):
                    if label == "downloading packages" and line.startswith("I: Retrieving"):
                        n_retrieved += 1
                        frac = 0.05 + min(n_retrieved / 220, 1.0) * 0.15
                    progress(label, frac)
                    return

        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", LC_ALL="C")
        _run_logged(
            [debootstrap, "--variant=minbase", f"--cache-dir={debs}", f"--include={','.join(PACKAGES)}",
             SUITE, str(tmp / "rootfs"), mirror],
            log, on_line, env,
        )
        progress("customizing guest", 0.86)
        _run_logged(["bash", str(customize_script()), str(tmp / "rootfs"), str(tmp / "boot")], log, env=env)
        progress("making ext4 disk", 0.93)
        raw = tmp / "root.raw"
        _run_logged([mkfs, "-q", "-F", "-L", "aoe-root", "-d", str(tmp / "rootfs"), str(raw), DISK_SIZE], log, env=env)
        progress("converting to qcow2", 0.97)
        _run_logged([qemu_img, "convert", "-O", "qcow2", str(raw), str(tmp / "base.qcow2")], log, env=env)
        raw.unlink()
        os.chmod(tmp / "base.qcow2", 0o444)
        meta = {"key": key, "arena": arena, "suite": SUITE, "format": FORMAT_VERSION,
                "packages": list(PACKAGES), "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (tmp / "image.json").write_text(json.dumps(meta, indent=2) + "\n")
        subprocess.run(["sync", "-f", str(tmp / "image.json")], capture_output=True)
        if final.exists():
            users = image_users(_image_from_dir(final, key))
            if users:
                raise ImageBuildError(
                    f"cannot replace {final}: in use by running territories ({', '.join(users[:3])}); "
                    "tear them down first"
                )
            trash = root / f".old-{final.name}-{os.getpid()}"
            os.rename(final, trash)
            safe_rmtree(trash)
        os.rename(tmp, final)
        progress("done", 1.0)
    except BaseException:
        with contextlib.suppress(ProviderError):
            safe_rmtree(tmp)
        raise


def ensure_image(
    arena: str = "first-build", progress: ProgressFn | None = None, *, force: bool = False
) -> GuestImage:
    """Return the guest image for ``arena``, building it first when missing (or ``force``).

    ``progress(stage_label, fraction)`` is called during a build with ``fraction`` in 0..1.
    A build takes about 2 minutes (warm .deb cache) and needs root, ``debootstrap``,
    ``mkfs.ext4`` (e2fsprogs) and ``qemu-img`` (qemu-utils). Concurrent callers serialize
    on a lock; the later ones reuse the finished build.

    Raises:
        ImageBuildError: a tool is missing or a build step failed (names the build log).
        ProviderError: unknown ``arena``.
    """
    key = recipe_key(arena)
    final = image_root() / f"{arena}-{key}"
    if not force:
        img = find_image(arena)
        if img is not None:
            return img
    user_cb: ProgressFn = progress or (lambda _label, _frac: None)
    best = 0.0

    def cb(label: str, frac: float) -> None:  # fractions never go backwards
        nonlocal best
        best = max(best, min(frac, 1.0))
        user_cb(label, best)

    with _build_lock():
        if not force:
            img = find_image(arena)
            if img is not None:
                cb("cached", 1.0)
                return img
        _build(arena, key, final, cb)
    img = find_image(arena)
    if img is None:  # pragma: no cover - _build guarantees completeness
        raise ImageBuildError(f"guest image build finished but {final} is incomplete")
    return img
