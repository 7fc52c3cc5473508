"""The package's build: setuptools, plus the native plan's library compiled into the
package (``kernelcli/kernels/native/``) for every variant of this machine's
architecture, with a record of their identity and checksums (``native.json``). The
recipe is kernelcli's own (``kernelcli/kernels/_native_recipe.py``), loaded by its path
here since the package cannot be imported before it is built.

A machine without a C++ compiler (or an architecture kernelcli builds none for) still
installs kernelcli: the native plan is then built at first use where a compiler
appears, else the CPU plan computes. ``KERNELCLI_BUILD_STRICT=1`` (CI) makes a missing
compiler, a failed build or any compiler warning fail the install instead."""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location(
    "_kernelcli_native_recipe", HERE / "kernelcli" / "kernels" / "_native_recipe.py")
recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recipe)
BUILD_SECONDS = 900  # all variants on two cores take about a minute


def _include_dir():
    """jaxlib's XLA FFI headers (a build requirement), found without importing jax."""
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(list(spec.submodule_search_locations)[0]) / "include")


def _compiler():
    for name in (os.environ.get("CXX"), "g++", "c++"):
        path = name and shutil.which(name)
        if path:
            return path
    return None


def _version(cxx):
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, timeout=60,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return cxx
    return (out.decode("utf-8", "replace").splitlines() or [cxx])[0].strip()


def build_native(target: Path, strict: bool) -> None:
    """Compile every variant into ``target`` and record them (``native.json``)."""
    cxx, include, names = _compiler(), _include_dir(), recipe.variants()
    why = ("no C++ compiler (g++, c++ or $CXX)" if cxx is None else
           "jaxlib's headers are missing" if include is None else
           f"kernelcli builds none for {os.uname().machine}" if not names else None)
    if why is None:
        with tempfile.TemporaryDirectory(prefix="kernelcli-native-") as tmp:
            folder, outs = Path(tmp), {v: Path(tmp) / recipe.library_name(v) for v in names}
            compiles, links = [], []
            for v in names:
                c, link = recipe.commands(cxx, v, include, folder, outs[v], werror=strict)
                compiles += c
                links.append(link)
            print(f"kernelcli: building the native library ({', '.join(names)}) with "
                  f"{cxx}", file=sys.stderr)
            why = (recipe.run(compiles, folder, BUILD_SECONDS)
                   or recipe.run(links, folder, BUILD_SECONDS))
            if why is None:
                target.mkdir(parents=True, exist_ok=True)
                built = {v: outs[v].read_bytes() for v in names}
                for v, data in built.items():
                    recipe.write_file(target / recipe.library_name(v), data, 0o755)
                recipe.write_record(target, recipe.record(
                    recipe.identity(), recipe.ffi_version(include), _version(cxx), built))
                return
    if strict:
        raise SystemExit(f"kernelcli: the native library was not built: {why}")
    print(f"kernelcli: warning: the native library was not built ({why}); the native "
          f"plan will be built at first use where a C++ compiler is", file=sys.stderr)


class BuildPy(build_py):
    """build_py, then the native library: into the package being built, or into the
    source tree for an editable install (which imports the package from there)."""

    def run(self):
        super().run()
        inplace = getattr(self, "editable_mode", False)
        target = (recipe.NATIVE if inplace else
                  Path(self.build_lib) / "kernelcli" / "kernels" / "native")
        build_native(target, os.environ.get("KERNELCLI_BUILD_STRICT") == "1")


class BinaryDistribution(Distribution):
    """A wheel for one platform: it carries compiled code."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPy}, distclass=BinaryDistribution)
