"""The kubelet's PodResources API (``k8s.io/kubelet/pkg/apis/podresources/v1``), as gRPC stubs.

``v1/api.proto`` is the kubelet's own file from the Go module ``k8s.io/kubelet@v0.37.2``
(``pkg/apis/podresources/v1/api.proto``), unchanged; ``v1/api_pb2*.py`` are generated from it,
from the repository root, by::

    pip install grpcio-tools==1.85.1
    python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. \\
        producers/node/podresources/v1/api.proto

(``tests/producers/node/test_kubelet_gpus.py`` regenerates them and checks they match.) The
generated code needs ``grpcio>=1.85.1`` and ``protobuf>=7.35.1``: the ``agent`` extra.
"""
