"""Generates the Python stubs of Envoy's rate-limit service from the .proto files the
envoy-types crate ships (the ones our server is built from): rls.proto and every file it
imports, transitively. Google's well-known types come with grpcio-tools.

    python gen_stubs.py <envoy-types>/proto <out>
"""
import os
import re
import sys

import grpc_tools
from grpc_tools import protoc

SERVICE = "envoy/service/ratelimit/v3/rls.proto"
IMPORT = re.compile(r'^import\s+(?:public\s+)?"([^"]+)";', re.M)


def closure(roots):
    """The .proto files SERVICE needs, each with the folder it is found in."""
    found, todo = {}, [SERVICE]
    while todo:
        rel = todo.pop()
        if rel in found:
            continue
        folder = next((d for d in roots if os.path.exists(os.path.join(d, rel))), None)
        found[rel] = folder
        if folder is not None:  # None: google/protobuf/*, shipped by grpc_tools
            with open(os.path.join(folder, rel)) as source:
                todo.extend(IMPORT.findall(source.read()))
    return [rel for rel, folder in found.items() if folder]


def main(proto, out):
    roots = [os.path.join(proto, d) for d in sorted(os.listdir(proto))]
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = ["protoc", f"-I{well_known}"] + [f"-I{d}" for d in roots]
    args += [f"--python_out={out}", f"--grpc_python_out={out}"] + closure(roots)
    return protoc.main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
