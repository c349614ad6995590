"""torchvision (v0.14) models built to match the project's configs, for the parity
tests and bench/bench_model.py: R50-FPN with frozen BN and trainable layers 3, and
the tiny config (configs/tiny.yaml) from torchvision parts."""
from collections import OrderedDict

import torch
from torch import nn
from torchvision.models import resnet50
from torchvision.models.detection import MaskRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.backbone_utils import BackboneWithFPN, _resnet_fpn_extractor
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
from torchvision.models.detection.rpn import RPNHead
from torchvision.models.resnet import Bottleneck
from torchvision.ops.feature_pyramid_network import LastLevelMaxPool
from torchvision.ops.misc import FrozenBatchNorm2d


def no_resize(model):
    """Inputs are already at their final size (a multiple of 32) and normalized."""
    model.transform.resize = lambda image, target=None: (image, target)
    return model


def build_r50(seed, h, w, **kw):
    torch.manual_seed(seed)
    body = resnet50(weights=None, norm_layer=FrozenBatchNorm2d)
    model = MaskRCNN(_resnet_fpn_extractor(body, 3), min_size=h, max_size=w, image_mean=[0.0, 0.0, 0.0],
                     image_std=[1.0, 1.0, 1.0], **kw)
    return no_resize(model)


# configs/tiny.yaml
TINY = dict(channels=(16, 32, 64, 128), fpn=32, anchor_sizes=(16, 32, 64, 128, 256), num_classes=4,
            fc_dim=64, mask_dim=16, mask_convs=2)


def tiny_body(channels, stem=None):
    stem = stem or channels[0]
    layers = OrderedDict(conv1=nn.Conv2d(3, stem, 7, 2, 3, bias=False), bn1=FrozenBatchNorm2d(stem),
                         relu=nn.ReLU(inplace=True), maxpool=nn.MaxPool2d(3, 2, 1))
    cin = stem
    for s, c in enumerate(channels):
        stride = 1 if s == 0 else 2
        down = nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False), FrozenBatchNorm2d(c))
        layers[f"layer{s + 1}"] = nn.Sequential(Bottleneck(cin, c // 4, stride, down, norm_layer=FrozenBatchNorm2d))
        cin = c
    return nn.Sequential(layers)


def build_tiny(seed, h, w, **kw):
    torch.manual_seed(seed)
    t = TINY
    backbone = BackboneWithFPN(tiny_body(t["channels"]), {f"layer{i + 1}": str(i) for i in range(4)},
                               list(t["channels"]), t["fpn"], extra_blocks=LastLevelMaxPool())
    anchors = AnchorGenerator(tuple((s,) for s in t["anchor_sizes"]), ((0.5, 1.0, 2.0),) * 5)
    F, K = t["fpn"], t["num_classes"]
    model = MaskRCNN(backbone, num_classes=None, min_size=h, max_size=w, image_mean=[0.0, 0.0, 0.0],
                     image_std=[1.0, 1.0, 1.0], rpn_anchor_generator=anchors, rpn_head=RPNHead(F, 3),
                     box_head=TwoMLPHead(F * 49, t["fc_dim"]), box_predictor=FastRCNNPredictor(t["fc_dim"], K),
                     mask_head=MaskRCNNHeads(F, [t["mask_dim"]] * t["mask_convs"], 1),
                     mask_predictor=MaskRCNNPredictor(t["mask_dim"], t["mask_dim"], K), **kw)
    return no_resize(model)


def tiny_sets():
    """--set overrides that make the C side equal to build_tiny's defaults where
    configs/tiny.yaml chose differently from torchvision."""
    return []
