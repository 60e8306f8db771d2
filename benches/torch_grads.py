"""Compares locus's gradients with PyTorch autograd (issue 33).

    LOCUS_BACKEND=cuda .gpu/benches/gpu grads /tmp/grads.safetensors
    python3 benches/torch_grads.py /tmp/grads.safetensors

The file (written by benches/gpu/grads.rs) holds, per case, the inputs `{case}.in{k}`,
the weights `{case}.r` and locus's gradients `{case}.grad{k}` of `sum(f(inputs) * r)`.
This script computes the same gradients with torch autograd in float64 on cuda:0 and
prints one line per case and a summary line; it exits 1 if any case is off by more than
1e-9 relative (+1e-12 absolute), or if a case of its table is missing from the file.
"""
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

dev = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def ce(x):
    return F.cross_entropy(x, torch.tensor([0, 4, 2, 2], device=x.device), reduction="mean")


CASES = {
    "add_broadcast": lambda x: x[0] + x[1],
    "sub": lambda x: x[0] - x[1],
    "mul_broadcast": lambda x: x[0] * x[1],
    "div": lambda x: x[0] / x[1],
    "scalar_ops": lambda x: ((2.0 - x[0]) * 3.0) / 2.0,
    "rdiv": lambda x: 3.0 / x[0],
    "relu": lambda x: torch.relu(x[0]),
    "abs": lambda x: torch.abs(x[0]),
    "square": lambda x: torch.square(x[0]),
    "sqrt": lambda x: torch.sqrt(x[0]),
    "exp": lambda x: torch.exp(x[0]),
    "log": lambda x: torch.log(x[0]),
    "tanh": lambda x: torch.tanh(x[0]),
    "sigmoid": lambda x: torch.sigmoid(x[0]),
    "gelu": lambda x: F.gelu(x[0]),
    "gelu_tanh": lambda x: F.gelu(x[0], approximate="tanh"),
    "pow3": lambda x: torch.pow(x[0], 3.0),
    "clamp": lambda x: torch.clamp(x[0], -0.5, 0.5),
    "matmul": lambda x: x[0] @ x[1],
    "bmm": lambda x: x[0] @ x[1],
    "matmul_shared_rhs": lambda x: x[0] @ x[1],
    "t": lambda x: x[0].t(),
    "transpose": lambda x: x[0].transpose(0, 2),
    "sum": lambda x: x[0].sum(),
    "sum_dim": lambda x: x[0].sum(1, keepdim=True),
    "mean": lambda x: x[0].mean(),
    "mean_dim": lambda x: x[0].mean(2),
    "max": lambda x: x[0].max(),
    "max_dim": lambda x: x[0].max(1).values,
    "softmax": lambda x: torch.softmax(x[0], 1),
    "log_softmax": lambda x: torch.log_softmax(x[0], 0),
    "cross_entropy": lambda x: ce(x[0]),
    "index_select": lambda x: x[0].index_select(0, torch.tensor([3, 0, 3, 1], device=x[0].device)),
    "narrow": lambda x: x[0].narrow(1, 1, 3),
    "select": lambda x: x[0].select(0, 2),
    "cat_dim": lambda x: torch.cat([x[0], x[1]], 1),
    "stack": lambda x: torch.stack([x[0], x[1]], 1),
    "reshape": lambda x: x[0].reshape(2, 6),
    "where": lambda x: torch.where(torch.tensor([[1, 0, 1], [0, 0, 1]], device=x[0].device).bool(), x[0], x[1]),
    "mlp": lambda x: torch.log_softmax(torch.tanh(x[0] @ x[1] + x[2]) @ x[3], 1),
}


def main():
    data = load_file(sys.argv[1], device=str(dev))
    bad, worst = [], 0.0
    for name, f in CASES.items():
        if f"{name}.r" not in data:
            print(f"{name}: MISSING from the file")
            bad.append(name)
            continue
        k = 0
        inputs = []
        while f"{name}.in{k}" in data:
            inputs.append(data[f"{name}.in{k}"].double().clone().requires_grad_(True))
            k += 1
        (f(inputs) * data[f"{name}.r"]).sum().backward()
        err = 0.0
        for i, x in enumerate(inputs):
            want = x.grad if x.grad is not None else torch.zeros_like(x)
            got = data[f"{name}.grad{i}"]
            diff = ((got - want).abs() - 1e-9 * want.abs()).max().item() if want.numel() else 0.0
            err = max(err, diff)
        worst = max(worst, err)
        ok = err <= 1e-12
        print(f"{name}: {'ok' if ok else 'OFF'} (max excess {err:.2e})")
        if not ok:
            bad.append(name)
    print(f"torch_grads: {len(CASES) - len(bad)} of {len(CASES)} cases within tolerance "
          f"(rel 1e-9 + abs 1e-12); torch {torch.__version__} on {dev}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
