#!/usr/bin/env python3
"""PyTorch (float64, CPU) reference for the CPU GPT-2 core: writes the fixtures that
tests/test_pytorch_reference.c compares against, so CI needs no PyTorch.

  /usr/bin/python3 dev/pytorch_reference.py [--out tests/fixtures]

(PyTorch: Debian's `apt-get install python3-torch`, or `pip install torch`.) Deterministic: a fixed
seed, so a re-run rewrites the same model and batch. Writes
  ref_model.bin    a tiny GPT-2 in llm.c's fp32 format (header 256 x int32: magic 20240326,
                   version 3, maxT, V, L, NH, C, Vp; then the 16 tensors in llm.c's order,
                   padded wte rows zero)
  ref_batch.bin    header 256 x int32: magic 20251001, version 1, B, T; then B x (T + 1) int32
                   tokens: row b's inputs are tokens [0, T), its targets tokens [1, T + 1)
  ref_outputs.bin  header 256 x int32: magic 20251002, version 1, B, T, V, Vp, C, L, NH, maxT,
                   n_params, n_steps; slots 16..21 hold the float32 bits of lr, beta1, beta2, eps,
                   weight decay, clip. Then float32: logits (B, T, V) (the first V of Vp columns),
                   loss, the gradient of the mean loss w.r.t. all n_params parameters (llm.c's
                   order and layout, padded wte rows included, wte's tied gradient summed as
                   autograd gives it), and for each of n_steps AdamW steps on that batch its loss
                   (before the update) then, after the n_steps losses, each step's gradient norm
                   (before clipping).
The computation is float64 throughout; only the stored values are rounded to float32 (relative
error 6e-8, far below what the C test's float32 tolerances allow).

The training steps follow train_tdpipe's semantics: constant lr (warmup 0, final fraction 1),
AdamW with beta1 0.9, beta2 0.95, eps 1e-8, decoupled weight decay 0.1 on the 2-D matrices only
(wte, wpe, qkvw, attprojw, fcw, fcprojw): p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p), bias
correction with t from 1, gradients scaled by clip / norm when the global norm exceeds clip.
"""
import argparse
import math
import os
import struct

torch = F = None  # imported in main, after the arguments: --help needs no PyTorch

L, C, NH, V, VP, MAXT = 2, 32, 4, 60, 128, 16
B, T = 2, 8
SEED = 20240326
LR, BETA1, BETA2, EPS, WD, CLIP = 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0
STEPS = 10
BATCH_MAGIC, OUTPUTS_MAGIC = 20251001, 20251002

# llm.c's order; shapes; whether AdamW decays it
PARAMS = [
    ("wte", (VP, C), True), ("wpe", (MAXT, C), True),
    ("ln1w", (L, C), False), ("ln1b", (L, C), False),
    ("qkvw", (L, 3 * C, C), True), ("qkvb", (L, 3 * C), False),
    ("attprojw", (L, C, C), True), ("attprojb", (L, C), False),
    ("ln2w", (L, C), False), ("ln2b", (L, C), False),
    ("fcw", (L, 4 * C, C), True), ("fcb", (L, 4 * C), False),
    ("fcprojw", (L, C, 4 * C), True), ("fcprojb", (L, C), False),
    ("lnfw", (C,), False), ("lnfb", (C,), False),
]


def make_params(gen):
    """Matrices N(0, 0.1) (attention away from uniform, GELU away from linear), LayerNorm weights
    1 + 0.1 N(0, 1), biases 0.05 N(0, 1), padded wte rows zero; rounded to float32 so that the
    file and the float64 reference hold the same values."""
    params = []
    for name, shape, _ in PARAMS:
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
        if name in ("ln1w", "ln2w", "lnfw"):
            x = 1.0 + 0.1 * x
        elif name.endswith("b"):
            x = 0.05 * x
        else:
            x = 0.1 * x
        if name == "wte":
            x[V:] = 0.0
        params.append(x.float().double())
    return params


def forward(p, idx, tgt):
    """GPT-2: tanh GELU, LayerNorm eps 1e-5, causal attention, tied LM head, cross-entropy over the
    first V logits (mean over B*T). Returns (logits (B, T, V), loss)."""
    (wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb) = p
    b, t = idx.shape
    hs = C // NH
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    x = wte[idx] + wpe[:t]
    for l in range(L):
        h = F.layer_norm(x, (C,), ln1w[l], ln1b[l], eps=1e-5)
        q, k, v = (h @ qkvw[l].T + qkvb[l]).split(C, dim=-1)
        q, k, v = (z.view(b, t, NH, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, C)
        x = x + y @ attprojw[l].T + attprojb[l]
        h = F.layer_norm(x, (C,), ln2w[l], ln2b[l], eps=1e-5)
        h = F.gelu(h @ fcw[l].T + fcb[l], approximate="tanh")
        x = x + h @ fcprojw[l].T + fcprojb[l]
    h = F.layer_norm(x, (C,), lnfw, lnfb, eps=1e-5)
    logits = (h @ wte.T)[..., :V]
    loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
    return logits, loss


def gradients(p, idx, tgt):
    for x in p:
        x.requires_grad_(True)
        x.grad = None
    logits, loss = forward(p, idx, tgt)
    loss.backward()
    grads = [x.grad.detach().clone() for x in p]
    for x in p:
        x.requires_grad_(False)
    return logits.detach(), loss.item(), grads


def train(p, idx, tgt):
    """STEPS AdamW steps on the one batch; returns each step's loss and gradient norm."""
    p = [x.clone() for x in p]
    m = [torch.zeros_like(x) for x in p]
    v = [torch.zeros_like(x) for x in p]
    losses, norms = [], []
    for step in range(1, STEPS + 1):
        _, loss, grads = gradients(p, idx, tgt)
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
        scale = CLIP / norm if norm > CLIP else 1.0
        losses.append(loss)
        norms.append(norm)
        for i, (_, _, decay) in enumerate(PARAMS):
            g = grads[i] * scale
            m[i] = BETA1 * m[i] + (1 - BETA1) * g
            v[i] = BETA2 * v[i] + (1 - BETA2) * g * g
            mhat = m[i] / (1 - BETA1 ** step)
            vhat = v[i] / (1 - BETA2 ** step)
            p[i] = p[i] - LR * (mhat / (vhat.sqrt() + EPS) + (WD if decay else 0.0) * p[i])
    return losses, norms


def header(values):
    h = [0] * 256
    h[: len(values)] = values
    return h


def f32_bits(x):
    return struct.unpack("<i", struct.pack("<f", x))[0]


def write(path, ints, floats=None):
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<256i", *ints[:256]))
        if len(ints) > 256:
            f.write(struct.pack("<%di" % (len(ints) - 256), *ints[256:]))
        if floats is not None:
            f.write(floats.to(torch.float32).numpy().astype("<f4").tobytes())
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures", help="directory for the three fixture files")
    args = ap.parse_args()
    global torch, F
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        raise SystemExit("pytorch_reference: needs PyTorch (pip install torch)")
    torch.set_num_threads(1)  # a fixed reduction order: the same float64 results on every run
    gen = torch.Generator().manual_seed(SEED)
    p = make_params(gen)
    tokens = torch.randint(0, V, (B, T + 1), generator=gen)
    tokens[1, 3] = tokens[0, 5]  # a repeated input token: one wte row gathers two encoder gradients
    idx, tgt = tokens[:, :T], tokens[:, 1:]

    logits, loss, grads = gradients(p, idx, tgt)
    losses, norms = train(p, idx, tgt)
    assert abs(losses[0] - loss) == 0.0

    os.makedirs(args.out, exist_ok=True)
    n_params = sum(x.numel() for x in p)
    flat = lambda ts: torch.cat([x.reshape(-1) for x in ts])
    write(os.path.join(args.out, "ref_model.bin"), header([20240326, 3, MAXT, V, L, NH, C, VP]), flat(p))
    write(os.path.join(args.out, "ref_batch.bin"), header([BATCH_MAGIC, 1, B, T]) + tokens.reshape(-1).tolist())
    h = header([OUTPUTS_MAGIC, 1, B, T, V, VP, C, L, NH, MAXT, n_params, STEPS])
    h[16:22] = [f32_bits(x) for x in (LR, BETA1, BETA2, EPS, WD, CLIP)]
    out = torch.cat([logits.reshape(-1), torch.tensor([loss], dtype=torch.float64), flat(grads),
                     torch.tensor(losses, dtype=torch.float64), torch.tensor(norms, dtype=torch.float64)])
    write(os.path.join(args.out, "ref_outputs.bin"), h, out)
    print("loss %.9f, %d params; step losses %s" % (loss, n_params, " ".join("%.6f" % x for x in losses)))
    print("grad norms %s (clip %g)" % (" ".join("%.4f" % x for x in norms), CLIP))


if __name__ == "__main__":
    main()
