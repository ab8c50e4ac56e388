"""An edit inside one class of a file of 40 module classes, against the same edit in a file holding
only that class and its users, through a real LSP client, with `import torch` in the same run.

The 40-class file is a models file in the style of timm: a ViT, a ResNet, a ConvNeXt, an MLP-Mixer,
a MobileNetV2, a GPT, a U-Net, an autoencoder, a PoolFormer, gated MLPs and small CNNs, each with
its blocks, and a few parents that use another family's blocks. The small file holds the ViT's
`Attention` (the target), its users (`Block`, `VisionTransformer`) and what they need
(`PatchEmbed`, `Mlp`): the unit an edit inside `Attention` captures. The edit inserts a new line
of code at the top of `Attention.forward` (`_edit = N`, a new N each time, so no cache answers).

  edit  - didChange -> publishDiagnostics for that version, warm server and worker, debounce 0,
          the compile check off (as in depth_sweep.py), the two files open in one server and
          edited in turn; also the classes each edit captured (`fxls/stats`: lastCaptured) and
          the CPU time of the server, worker and job per edit;
  torch - `python -c "import torch"`, timed between the edits' rounds.

Usage: .venv/bin/python bench/many_classes.py [--runs 9] [--out FILE]
       [--before /path/to/other/checkout]  (a server of another fxls too, alternating)
       [--profile FILE]  (the server under cProfile)  [--write FOLDER]  (the two files only)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lsp_bench
from depth_sweep import _server, cpu_seconds
from engine_bench import machine, stats
from lsp_bench import Bench

ROOT = Path(__file__).resolve().parents[1]
TARGET = "Attention"
EDIT_AFTER = "    def forward(self, x):\n        B, N, C = x.shape\n"
"""The edit goes after this text, which only the target's forward has."""

HEADER = '''\
"""Models of many families in one file."""

import math

import torch
import torch.nn.functional as F
from torch import nn
'''

VIT = """

class PatchEmbed(nn.Module):
    def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=192):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, dim, num_heads=3, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, in_features)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


# fxls: x = (B=2, 3, 224, 224)
class VisionTransformer(nn.Module):
    def __init__(self, depth=4, embed_dim=192, num_heads=3, num_classes=1000):
        super().__init__()
        self.patch_embed = PatchEmbed(embed_dim=embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.patch_embed.num_patches + 1, embed_dim))
        self.blocks = nn.Sequential(*[Block(embed_dim, num_heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])
"""

OTHERS = """

class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.down = None
        if stride != 1 or inplanes != planes:
            self.down = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        width = planes
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.down = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        return F.relu(self.bn3(self.conv3(out)) + self.down(x))


class ResNetStem(nn.Module):
    def __init__(self, out_chs=64):
        super().__init__()
        self.conv = nn.Conv2d(3, out_chs, 7, 2, 3, bias=False)
        self.bn = nn.BatchNorm2d(out_chs)
        self.pool = nn.MaxPool2d(3, 2, 1)

    def forward(self, x):
        return self.pool(F.relu(self.bn(self.conv(x))))


# fxls: x = (B=2, 3, 224, 224)
class ResNet(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = ResNetStem(64)
        self.layer1 = nn.Sequential(BasicBlock(64, 64), BasicBlock(64, 64))
        self.layer2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128))
        self.layer3 = nn.Sequential(Bottleneck(128, 64, 2), Bottleneck(256, 64))
        self.fc = nn.Linear(256, num_classes)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x):
        shortcut = x
        x = self.dwconv(x).permute(0, 2, 3, 1)
        x = self.pwconv2(F.gelu(self.pwconv1(self.norm(x))))
        return shortcut + (self.gamma * x).permute(0, 3, 1, 2)


class ConvNeXtStage(nn.Module):
    def __init__(self, in_chs, out_chs, depth=2):
        super().__init__()
        self.downsample = nn.Sequential(LayerNorm2d(in_chs), nn.Conv2d(in_chs, out_chs, 2, 2))
        self.blocks = nn.Sequential(*[ConvNeXtBlock(out_chs) for _ in range(depth)])

    def forward(self, x):
        return self.blocks(self.downsample(x))


# fxls: x = (B=2, 3, 224, 224)
class ConvNeXt(nn.Module):
    def __init__(self, dims=(48, 96, 192), num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0]))
        self.stages = nn.Sequential(ConvNeXtStage(dims[0], dims[0]), ConvNeXtStage(dims[0], dims[1]), ConvNeXtStage(dims[1], dims[2]))
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.head(x.mean((-2, -1)))


class MixerMlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class MixerBlock(nn.Module):
    def __init__(self, dim, seq_len):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.mlp_tokens = MixerMlp(seq_len, seq_len * 2)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp_channels = MixerMlp(dim, dim * 4)

    def forward(self, x):
        x = x + self.mlp_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.mlp_channels(self.norm2(x))


# fxls: x = (B=2, 3, 224, 224)
class MlpMixer(nn.Module):
    def __init__(self, dim=128, depth=4, patch=16, num_classes=1000):
        super().__init__()
        self.stem = nn.Conv2d(3, dim, patch, patch)
        self.blocks = nn.Sequential(*[MixerBlock(dim, (224 // patch) ** 2) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(1))


class SqueezeExcite(nn.Module):
    def __init__(self, chs, rd_ratio=0.25):
        super().__init__()
        rd = max(8, int(chs * rd_ratio))
        self.reduce = nn.Conv2d(chs, rd, 1)
        self.expand = nn.Conv2d(rd, chs, 1)

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(F.relu(self.reduce(s))))


class InvertedResidual(nn.Module):
    def __init__(self, in_chs, out_chs, stride=1, expand=6, se=False):
        super().__init__()
        mid = in_chs * expand
        self.use_res = stride == 1 and in_chs == out_chs
        self.conv_pw = nn.Sequential(nn.Conv2d(in_chs, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6())
        self.conv_dw = nn.Sequential(nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), nn.ReLU6())
        self.se = SqueezeExcite(mid) if se else nn.Identity()
        self.conv_pwl = nn.Sequential(nn.Conv2d(mid, out_chs, 1, bias=False), nn.BatchNorm2d(out_chs))

    def forward(self, x):
        out = self.conv_pwl(self.se(self.conv_dw(self.conv_pw(x))))
        return x + out if self.use_res else out


# fxls: x = (B=2, 3, 224, 224)
class MobileNetV2(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6())
        self.blocks = nn.Sequential(
            InvertedResidual(32, 16, expand=1),
            InvertedResidual(16, 24, 2),
            InvertedResidual(24, 24),
            InvertedResidual(24, 32, 2, se=True),
            InvertedResidual(32, 32, se=True),
        )
        self.head = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(x.mean((2, 3)))


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class GptMlp(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GptBlock(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = GptMlp(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


# fxls: idx = (B=2, T=64) int64
class GPT(nn.Module):
    def __init__(self, vocab_size=1000, block_size=128, n_layer=2, n_embd=128, n_head=4):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([GptBlock(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx):
        b, t = idx.size()
        x = self.wte(idx) + self.wpe(torch.arange(0, t, dtype=torch.long, device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class DoubleConv(nn.Module):
    def __init__(self, in_chs, out_chs):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_chs, out_chs, 3, padding=1, bias=False), nn.BatchNorm2d(out_chs), nn.ReLU(),
            nn.Conv2d(out_chs, out_chs, 3, padding=1, bias=False), nn.BatchNorm2d(out_chs), nn.ReLU(),
        )

    def forward(self, x):
        return self.net(x)


class Up(nn.Module):
    def __init__(self, in_chs, out_chs):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_chs, in_chs // 2, 2, 2)
        self.conv = DoubleConv(in_chs, out_chs)

    def forward(self, x1, x2):
        return self.conv(torch.cat([x2, self.up(x1)], dim=1))


# fxls: x = (B=1, 3, 64, 64)
class UNet(nn.Module):
    def __init__(self, in_chs=3, classes=2, base=16):
        super().__init__()
        self.inc = DoubleConv(in_chs, base)
        self.down1 = nn.Sequential(nn.MaxPool2d(2), DoubleConv(base, base * 2))
        self.down2 = nn.Sequential(nn.MaxPool2d(2), DoubleConv(base * 2, base * 4))
        self.up1 = Up(base * 4, base * 2)
        self.up2 = Up(base * 2, base)
        self.outc = nn.Conv2d(base, classes, 1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        return self.outc(self.up2(self.up1(x3, x2), x1))


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class GatedMLP(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ffn = SwiGLU(dim, hidden)

    def forward(self, x):
        return x + self.ffn(self.norm(x))


# fxls: x = (B=4, 256)
class ResidualMLP(nn.Module):
    def __init__(self, dim=256, depth=3):
        super().__init__()
        self.layers = nn.ModuleList([GatedMLP(dim, dim * 2) for _ in range(depth)])
        self.out = nn.Linear(dim, 10)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.out(x)


class ConvBNAct(nn.Module):
    def __init__(self, in_chs, out_chs, kernel_size=3, stride=1, groups=1):
        super().__init__()
        self.conv = nn.Conv2d(in_chs, out_chs, kernel_size, stride, kernel_size // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(out_chs)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class DepthwiseSeparable(nn.Module):
    def __init__(self, in_chs, out_chs, stride=1):
        super().__init__()
        self.dw = ConvBNAct(in_chs, in_chs, 3, stride, groups=in_chs)
        self.pw = ConvBNAct(in_chs, out_chs, 1)

    def forward(self, x):
        return self.pw(self.dw(x))


# fxls: x = (B=8, 3, 32, 32)
class SimpleCNN(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(ConvBNAct(3, 32), DepthwiseSeparable(32, 64, 2), DepthwiseSeparable(64, 128, 2))
        self.classifier = nn.Linear(128, num_classes)

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class Encoder(nn.Module):
    def __init__(self, in_dim=784, latent=32):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, 256)
        self.fc_mu = nn.Linear(256, latent)
        self.fc_logvar = nn.Linear(256, latent)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        return self.fc_mu(h), self.fc_logvar(h)


class Decoder(nn.Module):
    def __init__(self, latent=32, out_dim=784):
        super().__init__()
        self.fc1 = nn.Linear(latent, 256)
        self.fc2 = nn.Linear(256, out_dim)

    def forward(self, z):
        return torch.sigmoid(self.fc2(F.relu(self.fc1(z))))


# fxls: x = (B=16, 784)
class VAE(nn.Module):
    def __init__(self, latent=32):
        super().__init__()
        self.encoder = Encoder(latent=latent)
        self.decoder = Decoder(latent=latent)

    def forward(self, x):
        mu, logvar = self.encoder(x)
        z = mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)
        return self.decoder(z), mu, logvar


class Pooling(nn.Module):
    def __init__(self, pool_size=3):
        super().__init__()
        self.pool = nn.AvgPool2d(pool_size, 1, pool_size // 2, count_include_pad=False)

    def forward(self, x):
        return self.pool(x) - x


class PoolFormerBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm1 = nn.GroupNorm(1, dim)
        self.token_mixer = Pooling()
        self.norm2 = nn.GroupNorm(1, dim)
        self.mlp = nn.Sequential(nn.Conv2d(dim, dim * 4, 1), nn.GELU(), nn.Conv2d(dim * 4, dim, 1))

    def forward(self, x):
        x = x + self.token_mixer(self.norm1(x))
        return x + self.mlp(self.norm2(x))


# fxls: x = (B=2, 3, 224, 224)
class PoolFormer(nn.Module):
    def __init__(self, dim=64, depth=4, num_classes=1000):
        super().__init__()
        self.stem = nn.Conv2d(3, dim, 7, 4, 2)
        self.blocks = nn.Sequential(*[PoolFormerBlock(dim) for _ in range(depth)])
        self.norm = nn.GroupNorm(1, dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.norm(self.blocks(self.stem(x)))
        return self.head(x.mean((-2, -1)))


# fxls: x = (B=2, 3, 224, 224)
class ConvMixer(nn.Module):
    def __init__(self, dim=128, depth=2, patch=16, num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim, patch, patch), nn.BatchNorm2d(dim), nn.GELU())
        self.blocks = nn.Sequential(*[MixerBlock(dim, (224 // patch) ** 2) for _ in range(depth)])
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        return self.head(self.blocks(x).mean(1))


# fxls: x = (B=2, 3, 224, 224)
class SEResNet(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = ResNetStem(64)
        self.layer1 = nn.Sequential(BasicBlock(64, 64), SqueezeExcite(64))
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.layer1(self.stem(x))
        return self.fc(x.mean((2, 3)))
"""


def many() -> str:
    """The 40-class file: the ViT family first, then the others."""
    return HEADER + VIT + OTHERS


def few() -> str:
    """The target class, its users and what they need."""
    return HEADER + VIT


def edited(text: str, run: int) -> str:
    assert text.count(EDIT_AFTER) == 1
    return text.replace(EDIT_AFTER, f"{EDIT_AFTER}        _edit = {run}\n")


def classes(text: str) -> list[str]:
    import ast

    return [n.name for n in ast.parse(text).body if isinstance(n, ast.ClassDef)]


def import_torch() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - started


async def _edit(bench: Bench, uri: str, text: str, version: int) -> tuple[float, float, Any]:
    """Replace the whole text; (seconds to its diagnostics, CPU seconds, classes captured)."""
    from lsprotocol import types

    cpu_before = cpu_seconds(bench.pid)
    started = time.perf_counter()
    bench.client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )
    seconds = await bench.published(uri, version) - started
    await asyncio.sleep(0.05)  # let the zygote reap the job child
    cpu = cpu_seconds(bench.pid) - cpu_before
    cache = (await bench.stats()).cache
    return seconds, cpu, list(getattr(cache, "lastCaptured", None) or [])


async def bench_edits(folder: Path, runs: int, before: str | None) -> dict[str, Any]:
    """Each round edits each file in each server (this checkout's, and the one at ``before``)
    in turn, then times `import torch`."""
    texts = {"many": many(), "few": few()}
    servers = {"": await _server(True)}
    if before is not None:
        servers["before "] = await _server(True, before)
    runs_of = {s + k: {"seconds": [], "cpu": []} for s in servers for k in texts}
    out: dict[str, Any] = {"import_torch": []}
    try:
        uris = {}
        for s, bench in servers.items():
            for key, text in texts.items():
                uris[s + key] = bench.open(folder / f"{key}.py", text)
                await bench.published(uris[s + key], 1)  # warm: every class captured once
            await bench.warmed()  # the worker's warm-up done: an editor's steady state
        for run in range(runs + 1):  # the first round warms the edit's path; not counted
            order = list(texts.items()) if run % 2 else list(reversed(texts.items()))
            for s, bench in servers.items():
                for key, text in order:
                    edit = await _edit(bench, uris[s + key], edited(text, run), run + 2)
                    if run:
                        runs_of[s + key]["seconds"].append(edit[0])
                        runs_of[s + key]["cpu"].append(edit[1])
                    runs_of[s + key]["captured"] = edit[2]
            if run:
                out["import_torch"].append(import_torch())
            print(f"  run {run}/{runs} done", file=sys.stderr, flush=True)
    finally:
        for bench in servers.values():
            await bench.stop()
    for name, entry in runs_of.items():
        entry["classes"] = len(classes(texts[name.split()[-1]]))
        out[name] = {**entry, "seconds": stats(entry["seconds"]), "cpu": stats(entry["cpu"])}
    out["import_torch"] = stats(out["import_torch"])
    return out


def _ratio(report: dict[str, Any], prefix: str, at: str) -> float:
    seconds = report[prefix + "many"]["seconds"][at]
    return float(seconds / report[prefix + "few"]["seconds"][at])


def render(report: dict[str, Any]) -> str:
    m = report["machine"]

    def row(label: str, r: dict[str, Any]) -> str:
        s, c = r["seconds"], r["cpu"]
        return (
            f"| {label} | {r['classes']} | {len(r['captured'])} | {s['min'] * 1000:.0f} | "
            f"{s['median'] * 1000:.0f} | {c['median'] * 1000:.0f} |"
        )

    torch_s = report["import_torch"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux "
        f"{m['kernel']}, Python {m['python']}, torch {m['torch']}; 1-minute load "
        f"{report['load_before'][0]:.1f} at the start, {report['load_after'][0]:.1f} at "
        f"the end; {report['runs']} edits of each file in each server.",
        f'`python -c "import torch"` in the same run: min {torch_s["min"]:.2f} s, median '
        f"{torch_s['median']:.2f} s.",
        "",
        "| server | file | classes | captured per edit | min ms | median ms | CPU ms (median) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    prefixes = [p for p in ("", "before ") if p + "many" in report]
    for prefix in prefixes:
        name = prefix.strip() or "this checkout"
        lines.append(row(f"{name} | 40 classes", report[prefix + "many"]))
        lines.append(row(f"{name} | {TARGET} and its users", report[prefix + "few"]))
    lines.append("")
    for prefix in prefixes:
        ratio = _ratio(report, prefix, "median")
        lines.append(
            f"- {prefix.strip() or 'this checkout'}: ratio of medians **{ratio:.2f}×** (of "
            f"minimums {_ratio(report, prefix, 'min'):.2f}×); goal ≤ 1.5×: "
            f"{'holds' if ratio <= 1.5 else 'missed'}"
        )
    lines.append(f"\nCaptured per edit: {', '.join(report['many']['captured'])}.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--write", help="write the two files to this folder and stop")
    parser.add_argument(
        "--before", help="also a server of the fxls in this folder (PYTHONPATH), alternating"
    )
    parser.add_argument("--profile", help="run the server under cProfile, its stats to this file")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "many_classes.json"))
    args = parser.parse_args()
    if args.write:
        Path(args.write, "many.py").write_text(many())
        Path(args.write, "few.py").write_text(few())
        return
    if args.profile:
        lsp_bench.SERVER[1:1] = ["-m", "cProfile", "-o", str(Path(args.profile).resolve())]
    report: dict[str, Any] = {"machine": machine(), "runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="fxls-many-") as tmp:
        folder = Path(tmp)
        here = os.getcwd()
        os.chdir(folder)  # `python -m fxls` imports the fxls of its working folder first
        report["load_before"] = os.getloadavg()
        report.update(asyncio.run(bench_edits(folder, args.runs, args.before)))
        report["load_after"] = os.getloadavg()
        os.chdir(here)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(render(report))


if __name__ == "__main__":
    main()
