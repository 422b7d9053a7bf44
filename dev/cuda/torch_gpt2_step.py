# The side-by-side anchor for train_tdpipe's GPT-2 124M tokens/s on a GPU: the same model shape
# (L 12, C 768, NH 12, Vp 50304, tied embedding), the same B and T, trained by PyTorch as a user would
# instead (bf16 autocast, fp32 master weights, flash attention through SDPA, fused AdamW), on random
# tokens. Prints nccl-tests style key=value lines. Tooling only: nothing in the trainer depends on it.
# Usage: python3 dev/cuda/torch_gpt2_step.py [-b 16] [-t 1024] [--steps 20] [--compile]
import argparse
import math
import time


def positive(s):
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{s} is not a positive integer")
    return v


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch's GPT-2 124M training step on a GPU, the anchor beside train_tdpipe's tokens/s")
    ap.add_argument("-b", type=positive, default=16, help="batch size (default 16)")
    ap.add_argument("-t", type=positive, default=1024, help="sequence length, at most 1024 (default 1024)")
    ap.add_argument("--steps", type=positive, default=20, help="steps timed; the first 3 are left out of the mean, so at least 4 (default 20)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = ap.parse_args(argv)
    if a.t > 1024:
        ap.error(f"-t {a.t}: GPT-2's position table has 1024 rows")
    if a.steps < 4:
        ap.error(f"--steps {a.steps}: the first 3 steps are left out of the mean, so at least 4")
    return a


# The model's classes subclass nn.Module, so they are made once torch is imported (after the
# arguments are read: --help and a refused argument need no PyTorch)
def gpt2_class():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, C, NH):
            super().__init__()
            self.NH = NH
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):  # x (B, T, C)
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)  # each (B, T, C)
            q, k, v = (y.view(B, T, self.NH, C // self.NH).transpose(1, 2) for y in (q, k, v))  # (B, NH, T, hs)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
            x = x + self.proj(a)
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self, L=12, C=768, NH=12, Vp=50304, maxT=1024):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(maxT, C)
            self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
            self.lnf = nn.LayerNorm(C)
            for name, p in self.named_parameters():  # GPT-2's init, as train_tdpipe's: N(0, 0.02), the residual
                if p.dim() == 2:  # projections' scaled by 1/sqrt(2 L); biases 0 (LayerNorms keep 1 and 0)
                    std = 0.02 / math.sqrt(2 * L) if name.endswith(("proj.weight", "fcproj.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif "ln" not in name:
                    nn.init.zeros_(p)

        def forward(self, idx, targets):  # idx, targets (B, T)
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for b in self.blocks:
                x = b(x)
            logits = self.lnf(x) @ self.wte.weight.t()  # (B, T, Vp), the tied embedding
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))

    return GPT2


def main():
    a = parse_args()
    try:
        import torch
    except ImportError:
        raise SystemExit("torch_gpt2_step.py: PyTorch is not installed (pip install torch); it is the anchor being measured")
    if not torch.cuda.is_available():
        raise SystemExit("torch_gpt2_step.py: PyTorch sees no CUDA GPU; this measures a GPU step")
    GPT2 = gpt2_class()

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = GPT2().cuda()
    n_params = sum(p.numel() for p in model.parameters())  # the tied embedding once, as train_tdpipe counts
    step_model = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.0, fused=True)
    x = torch.randint(0, 50257, (a.b, a.t), device="cuda")
    y = torch.randint(0, 50257, (a.b, a.t), device="cuda")
    times = []
    for step in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    ms = 1e3 * sum(times[3:]) / len(times[3:])  # the first steps (allocator, autotuning, compilation) left out
    tokens = a.b * a.t
    # FLOPs as train_tdpipe's MFU counts them (llm.c's estimate): 6 N per token plus 6 L T C for attention
    flops = (6 * n_params + 6 * 12 * a.t * 768) * tokens
    print(f"torch={torch.__version__} device={torch.cuda.get_device_name()} mode={'compile' if a.compile else 'eager'} B={a.b} T={a.t}")
    print(f"step_ms={ms:.2f} tokens_per_s={tokens / ms * 1e3:.0f} tflops={flops / ms / 1e9:.1f} mfu_h100_h200_sxm={100 * flops / ms / 1e9 / 989.4:.1f}% loss={loss.item():.4f} (steps 4..{a.steps})")
    assert math.isfinite(loss.item())


if __name__ == "__main__":
    main()
