"""refusion_build - the PEP 517 build backend of the refusion Python package.

In-tree and with no requirements (pyproject.toml: requires = [],
backend-path = ["build_backend"]), so that `pip install ./python` builds
without downloading anything: the package is pure Python (ctypes over the
installed librefusion.so), and its wheel is a zip of refusion/ with the
metadata the wheel format asks for (PEP 427, core metadata 2.1).

The version is CMakeLists.txt's project(refusion VERSION x.y.z) in the
source tree, or the VERSION file `cmake --install` writes beside
pyproject.toml.

The wheel records where librefusion was when it was built, in
refusion/_install_info.py (LIBRARY_DIRS, searched after $REFUSION_LIB):
the directory given as `--config-settings libdir=DIR`, else the lib
directory of the `cmake --install` prefix this package was installed under
(PREFIX/share/refusion/python), else the source tree's build/ (what
scripts/build.sh builds). A directory without librefusion.so.0 at build time
is not recorded; the package then looks where its docstring says."""
import base64
import glob
import hashlib
import os
import re
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "refusion"
SONAME = "librefusion.so.0"
SUMMARY = "ReFusion diffusion language models on the CPU: Python binding of librefusion (ctypes)"


def _version():
    cmake = os.path.join(HERE, "..", "CMakeLists.txt")
    if os.path.exists(cmake):
        m = re.search(r"^project\(refusion VERSION ([0-9]+\.[0-9]+\.[0-9]+)", open(cmake).read(), re.M)
        if m:
            return m.group(1)
    path = os.path.join(HERE, "VERSION")
    if os.path.exists(path):
        return open(path).read().strip()
    raise RuntimeError("no version: neither ../CMakeLists.txt nor VERSION beside pyproject.toml")


def _library_dirs(config_settings):
    """Where librefusion.so.0 is now, for the installed package to look first."""
    given = (config_settings or {}).get("libdir")
    if given:
        given = os.path.abspath(given)
        if not os.path.exists(os.path.join(given, SONAME)):
            raise RuntimeError("libdir=%s: no %s there" % (given, SONAME))
        return [given]
    share = os.path.dirname(HERE)  # PREFIX/share/refusion for the installed copy
    if os.path.basename(share) == "refusion":
        prefix = os.path.normpath(os.path.join(share, "..", ".."))
        found = sorted(glob.glob(os.path.join(prefix, "lib*", SONAME)) +
                       glob.glob(os.path.join(prefix, "lib*", "*", SONAME)))
        return [os.path.dirname(f) for f in found[:1]]
    build = os.path.normpath(os.path.join(HERE, "..", "build"))
    if os.path.exists(os.path.join(HERE, "..", "CMakeLists.txt")) and os.path.exists(os.path.join(build, SONAME)):
        return [build]
    return []


def _install_info(config_settings):
    return ("# written by the build backend (build_backend/refusion_build.py) into the wheel\n"
            "VERSION = %r\nLIBRARY_DIRS = %r\n" % (_version(), _library_dirs(config_settings)))


def _metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nRequires-Python: >=3.8\n"
            "License: see the refusion repository\n" % (NAME, _version(), SUMMARY))


def _dist_info():
    return "%s-%s.dist-info" % (NAME, _version())


def get_requires_for_build_wheel(config_settings=None):
    """Nothing to install before building."""
    return []


def get_requires_for_build_sdist(config_settings=None):
    """Nothing to install before building."""
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    """The .dist-info directory with METADATA, for pip's resolver."""
    d = os.path.join(metadata_directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write(_metadata())
    return _dist_info()


def _record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arc, digest, len(data))


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """refusion-VERSION-py3-none-any.whl in wheel_directory."""
    name = "%s-%s-py3-none-any.whl" % (NAME, _version())
    files = []
    pkg = os.path.join(HERE, NAME)
    for root, _, names in sorted(os.walk(pkg)):
        for n in sorted(names):
            if n.endswith(".py"):
                full = os.path.join(root, n)
                files.append((os.path.relpath(full, HERE).replace(os.sep, "/"), open(full, "rb").read()))
    files.append((NAME + "/_install_info.py", _install_info(config_settings).encode()))
    di = _dist_info()
    files.append((di + "/METADATA", _metadata().encode()))
    files.append((di + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: refusion_build\nRoot-Is-Purelib: true\n"
                                 b"Tag: py3-none-any\n"))
    record = [_record_line(a, d) for a, d in files] + [di + "/RECORD,,"]
    files.append((di + "/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            z.writestr(arc, data)
    return name


def build_sdist(sdist_directory, config_settings=None):
    """refusion-VERSION.tar.gz: pyproject.toml, the backend, the package and VERSION."""
    import tarfile
    base = "%s-%s" % (NAME, _version())
    path = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(path, "w:gz") as t:
        for rel in ["pyproject.toml", "build_backend/refusion_build.py"] + [
                os.path.join(NAME, n) for n in sorted(os.listdir(os.path.join(HERE, NAME))) if n.endswith(".py")]:
            t.add(os.path.join(HERE, rel), arcname=base + "/" + rel)
        import io
        v = _version().encode() + b"\n"
        info = tarfile.TarInfo(base + "/VERSION")
        info.size = len(v)
        t.addfile(info, io.BytesIO(v))
        m = _metadata().encode()
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size = len(m)
        t.addfile(info, io.BytesIO(m))
    return os.path.basename(path)
