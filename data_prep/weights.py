#!/usr/bin/env python3
"""Weight import/export between torchvision state_dicts (.pth) and the project's
HDF5 checkpoint (schema v1).

    weights.py import model.pth model.h5     # torchvision Mask R-CNN or ImageNet ResNet
    weights.py export model.h5 model.pth     # back to a torchvision state_dict

Run with the Python that has torch and h5py (Debian: /usr/bin/python3).

Name mapping (torchvision -> /model/<name> in the HDF5 file)
-----------------------------------------------------------
Names are torchvision's new style (v0.13+). Older keys are renamed on import:
    backbone.fpn.inner_blocks.<i>.{weight,bias}  -> backbone.fpn.inner_blocks.<i>.0.*
    backbone.fpn.layer_blocks.<i>.{weight,bias}  -> backbone.fpn.layer_blocks.<i>.0.*
    rpn.head.conv.{weight,bias}                  -> rpn.head.conv.0.0.*
    roi_heads.mask_head.mask_fcn<k>.*            -> roi_heads.mask_head.<k-1>.0.*
An ImageNet ResNet state_dict (conv1.weight, layer1.0.conv1.weight, ...) gets the
prefix backbone.body.; its fc.* goes to /extra (kept for the round trip only).

Layouts (torchvision -> project):
    conv weights (K, C, R, S)            -> (K, R, S, C)
    conv5_mask (ConvTranspose2d) (C, K, 2, 2) -> (K, 2, 2, C)
    roi_heads.box_head.fc6.weight (O, C*7*7) in (C, 7, 7) order -> (O, 7*7*C) in (7, 7, C) order
    everything else (biases, BN vectors, fc7, predictors) unchanged.

Frozen batch-norm: the importer writes the BN tensors (<bn>.weight, .bias,
.running_mean, .running_var) beside the unfolded conv weight; the C loader folds
them into the conv (weight * scale, bias = beta - mean * scale, eps 1e-5) and the
model's parameter list then has "<conv>.bias" (e.g. backbone.body.layer1.0.conv1.bias)
in place of the BN. A checkpoint saved by the C code holds those folded convs W' = s W
(and /fold_scale/<conv>.weight, the (K) scales s, when mrcnn_checkpoint_save_model
wrote it; a training checkpoint names the file it started from in /config MODEL.WEIGHTS,
whose BN tensors give s). Export writes torchvision's parameterization back: conv
weight W'/s and a BN with weight s, bias = folded bias, mean 0, var 1 - eps, which
FrozenBatchNorm2d turns into the same map (weight 1 and W' where s is unknown).
Non-float entries (num_batches_tracked) and anything unrecognized go to /extra/<key>.

Round trip: import stores the original keys (attribute source_keys), so export of an
imported file gives back the same keys in the same order, bit-identical tensors.
"""
import argparse
import json
import os
import re
import sys

import h5py
import numpy as np
import torch

SCHEMA_VERSION = 1
BN_EPS = 1e-5
FC6_RESOLUTION = 7


def canonical_name(key):
    """torchvision key (old or new style, Mask R-CNN or ImageNet ResNet) -> project name."""
    if re.match(r"^(conv1|bn1|layer\d)\.", key):
        key = "backbone.body." + key
    m = re.match(r"^(backbone\.fpn\.(?:inner|layer)_blocks\.\d+)\.(weight|bias)$", key)
    if m:
        return f"{m.group(1)}.0.{m.group(2)}"
    m = re.match(r"^rpn\.head\.conv\.(weight|bias)$", key)
    if m:
        return f"rpn.head.conv.0.0.{m.group(1)}"
    m = re.match(r"^roi_heads\.mask_head\.mask_fcn(\d+)\.(weight|bias)$", key)
    if m:
        return f"roi_heads.mask_head.{int(m.group(1)) - 1}.0.{m.group(2)}"
    return key


def is_model_tensor(name, t):
    return (name.startswith(("backbone.", "rpn.", "roi_heads.")) and t.dtype == torch.float32
            and not name.endswith("num_batches_tracked"))


def to_project(name, t):
    """torchvision tensor -> project layout (numpy float32)."""
    a = t.detach().cpu().contiguous()
    if name == "roi_heads.mask_predictor.conv5_mask.weight":
        a = a.permute(1, 2, 3, 0)
    elif a.dim() == 4:
        a = a.permute(0, 2, 3, 1)
    elif name == "roi_heads.box_head.fc6.weight":
        o, i = a.shape
        c = i // (FC6_RESOLUTION * FC6_RESOLUTION)
        a = a.reshape(o, c, FC6_RESOLUTION, FC6_RESOLUTION).permute(0, 2, 3, 1).reshape(o, i)
    return a.contiguous().numpy()


def from_project(name, a):
    """project layout (numpy) -> torchvision tensor."""
    t = torch.from_numpy(np.ascontiguousarray(a))
    if name == "roi_heads.mask_predictor.conv5_mask.weight":
        t = t.permute(3, 0, 1, 2)
    elif t.dim() == 4:
        t = t.permute(0, 3, 1, 2)
    elif name == "roi_heads.box_head.fc6.weight":
        o, i = t.shape
        c = i // (FC6_RESOLUTION * FC6_RESOLUTION)
        t = t.reshape(o, FC6_RESOLUTION, FC6_RESOLUTION, c).permute(0, 3, 1, 2).reshape(o, i)
    return t.contiguous().clone()


def load_state_dict(path):
    sd = torch.load(path, map_location="cpu")
    if isinstance(sd, dict) and "model" in sd and isinstance(sd["model"], dict):
        sd = sd["model"]
    if not isinstance(sd, dict):
        sys.exit(f"weights.py: {path} holds a {type(sd).__name__}, not a state_dict")
    return sd


def import_state_dict(sd, out_path):
    keys = list(sd.keys())
    with h5py.File(out_path, "w") as f:
        f.attrs["schema_version"] = np.int32(SCHEMA_VERSION)
        f.attrs["source_keys"] = json.dumps(keys)
        g = f.create_group("model")
        e = f.create_group("extra")
        for k in keys:
            t = sd[k]
            name = canonical_name(k)
            if is_model_tensor(name, t):
                if name in g:
                    sys.exit(f"weights.py: {k} maps to {name}, which another key already took")
                g.create_dataset(name, data=to_project(name, t))
            else:
                e.create_dataset(k, data=t.detach().cpu().numpy())


def bn_of_folded_bias(name):
    """The BN a folded backbone conv bias stands for, or None."""
    m = re.match(r"^(backbone\.body\.)conv1\.bias$", name)
    if m:
        return m.group(1) + "bn1"
    m = re.match(r"^(backbone\.body\.layer\d+\.\d+\.)conv(\d)\.bias$", name)
    if m:
        return f"{m.group(1)}bn{m.group(2)}"
    m = re.match(r"^(backbone\.body\.layer\d+\.\d+\.downsample\.)0\.bias$", name)
    if m:
        return m.group(1) + "1"
    return None


def export_state_dict(h5_path):
    sd = {}
    with h5py.File(h5_path, "r") as f:
        v = int(f.attrs.get("schema_version", -1))
        if v != SCHEMA_VERSION:
            sys.exit(f"weights.py: {h5_path} has schema_version {v}, expected {SCHEMA_VERSION}")
        g = f["model"]
        if "source_keys" in f.attrs:
            for k in json.loads(f.attrs["source_keys"]):
                name = canonical_name(k)
                if "extra" in f and k in f["extra"]:
                    sd[k] = torch.from_numpy(np.array(f["extra"][k]))
                elif name in g:
                    sd[k] = from_project(name, np.array(g[name]))
                else:
                    sys.exit(f"weights.py: {h5_path} lacks /model/{name} (from key {k})")
            return sd
        scales = fold_scales(f, h5_path)
        for name in g:
            a = np.array(g[name])
            bn = bn_of_folded_bias(name)
            if bn is not None:
                k = a.shape[0]
                s = scales.get(name[:-len(".bias")] + ".weight")
                sd[bn + ".weight"] = torch.ones(k) if s is None else torch.from_numpy(s.copy())
                sd[bn + ".bias"] = torch.from_numpy(a.copy())
                sd[bn + ".running_mean"] = torch.zeros(k)
                sd[bn + ".running_var"] = torch.full((k,), 1.0 - BN_EPS)
            elif name in scales:
                # torchvision's W = W'/s: the parameterization it trains (FrozenBatchNorm2d after it)
                sd[name] = from_project(name, a / scales[name].reshape((-1,) + (1,) * (a.ndim - 1)))
            else:
                sd[name] = from_project(name, a)
    return sd


def fold_scales(f, h5_path):
    """conv weight name -> (K) float32 scale s folded into it (W' = s W): /fold_scale of
    the file (mrcnn_checkpoint_save_model writes it), else the frozen BN tensors of the
    file the run started from (a training checkpoint's /config MODEL.WEIGHTS, when it
    holds them unfolded), s computed as the C loader does (float32 w / sqrt(var + eps)).
    {} when neither says: W' is then exported with a BN of scale 1, the same map."""
    if "fold_scale" in f:
        return {n: np.array(f["fold_scale"][n], np.float32) for n in f["fold_scale"]}
    if "config" not in f:
        return {}
    cfg = f["config"][()]
    cfg = cfg.decode() if isinstance(cfg, bytes) else str(cfg)
    # the dump's flat "MODEL.WEIGHTS: ..." line, or WEIGHTS: nested under MODEL:
    m = re.search(r"^\s*(?:MODEL\.)?WEIGHTS:\s*['\"]?([^'\"\n#]+?)['\"]?\s*$", cfg, re.M)
    src = m.group(1).strip() if m else ""
    if not src:
        return {}
    if not os.path.isabs(src) and not os.path.exists(src):
        src = os.path.join(os.path.dirname(os.path.abspath(h5_path)), src)
    if not os.path.exists(src):
        print(f"weights.py: {h5_path}: MODEL.WEIGHTS {src} not found: folded convs exported with a BN of scale 1",
              file=sys.stderr)
        return {}
    out = {}
    with h5py.File(src, "r") as w:
        if "model" not in w:
            return {}
        g = w["model"]
        for name in f["model"]:
            bn = bn_of_folded_bias(name)
            if bn is None or bn + ".weight" not in g or bn + ".running_var" not in g:
                continue
            gamma = np.array(g[bn + ".weight"], np.float32)
            var = np.array(g[bn + ".running_var"], np.float32)
            out[name[:-len(".bias")] + ".weight"] = gamma / np.sqrt(var + np.float32(BN_EPS))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("import", help=".pth -> .h5")
    a.add_argument("pth")
    a.add_argument("h5")
    b = sub.add_parser("export", help=".h5 -> .pth")
    b.add_argument("h5")
    b.add_argument("pth")
    args = ap.parse_args()
    if args.cmd == "import":
        import_state_dict(load_state_dict(args.pth), args.h5)
    else:
        torch.save(export_state_dict(args.h5), args.pth)


if __name__ == "__main__":
    main()
