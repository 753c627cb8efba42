#!/usr/bin/env bash
# The Python package as a newcomer gets it: a wheel built from the source
# tree, installed into a FRESH venv (its dependencies — websockets,
# ag-ui-protocol, pydantic — from the registry, newest allowed), then
# imported, its CLI run, and the integration scenarios
# (tests/client_python.rs) run against that installed copy.
# usage: bash clients/python/tests/packed.sh   (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../../.."
fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
python3 -m venv "$fresh/venv"
"$fresh/venv/bin/pip" install -q --disable-pip-version-check build
# Built from a copy: the build's by-products stay out of the source tree.
mkdir "$fresh/src" && cp -r clients/python/pyproject.toml clients/python/README.md clients/python/LICENSE-* clients/python/src "$fresh/src/"
"$fresh/venv/bin/python" -m build -q --wheel --outdir "$fresh/dist" "$fresh/src" >/dev/null
"$fresh/venv/bin/pip" install -q --disable-pip-version-check "$fresh"/dist/agui_gateway_client-*.whl
"$fresh/venv/bin/python" -m agui_gateway_client --help >/dev/null
"$fresh/venv/bin/agui-gateway-client" watch --help >/dev/null
"$fresh/venv/bin/python" - <<'PY'
import importlib.metadata as md, pathlib
import agui_gateway_client as c
assert pathlib.Path(c.__file__).parent.joinpath("py.typed").exists(), "py.typed is shipped"
meta = md.metadata("agui-gateway-client")
print("installed", meta["Name"], meta["Version"], "license:", meta.get("License") or meta.get("License-Expression"),
      "websockets", md.version("websockets"), "ag-ui-protocol", md.version("ag-ui-protocol"))
PY
AGUI_TEST_PY_CLIENT="$fresh/venv/bin/python" cargo test -q --features failpoints --test client_python
