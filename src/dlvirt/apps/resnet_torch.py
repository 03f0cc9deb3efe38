"""ResNet50 v1.5 in plain torch (torchvision does not import beside the CPU build of torch).

v1.5 is MLPerf's ResNet50: the stride-2 of each down-sampling bottleneck sits in its 3×3
convolution, not its first 1×1. Parameter names follow torchvision's ``resnet50`` (``conv1``,
``bn1``, ``layer1.0.conv1``, ``layer1.0.downsample.0``, ..., ``fc``), so its state dicts and MLPerf's
PyTorch checkpoint load as they are. ``forward`` ends in a softmax, as Keras's ResNet50 does, so
both IC backends hand post-processing the same class probabilities.
"""

from __future__ import annotations

from typing import Any

LAYERS = (3, 4, 6, 3)   # bottleneck blocks per stage
WIDTHS = (64, 128, 256, 512)
EXPANSION = 4


def build(num_classes: int) -> Any:
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, inplanes: int, width: int, stride: int) -> None:
            super().__init__()
            out = width * EXPANSION
            self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)  # v1.5: stride here
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, out, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or inplanes != out:
                self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride=stride, bias=False),
                                                nn.BatchNorm2d(out))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            identity = x if self.downsample is None else self.downsample(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            return self.relu(self.bn3(self.conv3(y)) + identity)

    class ResNet50(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            inplanes = 64
            for stage, (blocks, width) in enumerate(zip(LAYERS, WIDTHS, strict=True), start=1):
                layer = []
                for block in range(blocks):
                    layer.append(Bottleneck(inplanes, width, 2 if block == 0 and stage > 1 else 1))
                    inplanes = width * EXPANSION
                setattr(self, f"layer{stage}", nn.Sequential(*layer))
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(inplanes, num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            for stage in range(1, len(LAYERS) + 1):
                x = getattr(self, f"layer{stage}")(x)
            logits = self.fc(torch.flatten(self.avgpool(x), 1))
            return torch.softmax(logits, dim=1)

    return ResNet50()
