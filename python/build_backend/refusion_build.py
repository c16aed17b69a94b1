"""refusion_build - the PEP 517 build backend of the refusion Python package.

In-tree and with no requirements (pyproject.toml: requires = [],
backend-path = ["build_backend"]), so that `pip install ./python` builds
without downloading anything: the package is pure Python (ctypes over the
installed librefusion.so), and its wheel is a zip of refusion/ with the
metadata the wheel format asks for (PEP 427, core metadata 2.1).

The version is CMakeLists.txt's project(refusion VERSION x.y.z) in the
source tree, or the VERSION file `cmake --install` writes beside
pyproject.toml."""
import base64
import hashlib
import os
import re
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "refusion"
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
