"""The MLPerf RNN-T (PyTorch) with the reference checkpoint's parameter names: encoder LSTM 2 × 1024
→ time stacking × 2 → LSTM 3 × 1024, prediction network embedding + LSTM 2 × 320, joint
1344 → 512 → 29 (28 characters + blank).
"""

from __future__ import annotations

from typing import Any

from dlvirt.apps.sr.features import FEATURES

LABELS = " abcdefghijklmnopqrstuvwxyz'"
BLANK = len(LABELS)
NUM_CLASSES = len(LABELS) + 1
STACK_TIME = 2
ENCODER_HIDDEN = 1024
PRE_LAYERS = 2
POST_LAYERS = 3
PRED_HIDDEN = 320
PRED_LAYERS = 2
JOINT_HIDDEN = 512
DROPOUT = 0.32  # identity at inference; kept so the joint's layer indices match the checkpoint
FORGET_GATE_BIAS = 1.0


def build_model() -> Any:
    """The MLPerf RNN-T with its parameter names (``encoder.pre_rnn.lstm.weight_ih_l0`` ...)."""
    import torch
    from torch import nn

    class Lstm(nn.Module):
        def __init__(self, input_size: int, hidden: int, layers: int) -> None:
            super().__init__()
            self.lstm = nn.LSTM(input_size, hidden, layers)
            # The reference initialises the forget gate's input bias to 1 and its recurrent bias to 0.
            for name, value in self.lstm.named_parameters():
                if name.startswith("bias_"):
                    with torch.no_grad():
                        value[hidden:2 * hidden] = FORGET_GATE_BIAS if name.startswith("bias_ih") else 0.0

        def forward(self, x: Any, state: Any = None) -> Any:
            return self.lstm(x, state)

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pre_rnn = Lstm(FEATURES, ENCODER_HIDDEN, PRE_LAYERS)
            self.post_rnn = Lstm(STACK_TIME * ENCODER_HIDDEN, ENCODER_HIDDEN, POST_LAYERS)

        def forward(self, x: Any, lengths: Any) -> tuple[Any, Any]:
            """(T, B, 240) padded features → (B, ceil(T / 2), 1024) and the new lengths."""
            x, _ = self.pre_rnn(x)
            steps, batch, hidden = x.shape
            pad = (-steps) % STACK_TIME
            if pad:
                x = torch.cat([x, x.new_zeros(pad, batch, hidden)])
            x = x.transpose(0, 1).reshape(batch, (steps + pad) // STACK_TIME, STACK_TIME * hidden).transpose(0, 1)
            x, _ = self.post_rnn(x)
            return x.transpose(0, 1), (lengths + STACK_TIME - 1) // STACK_TIME

    class Prediction(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(NUM_CLASSES - 1, PRED_HIDDEN)  # blank is never fed back
            self.dec_rnn = Lstm(PRED_HIDDEN, PRED_HIDDEN, PRED_LAYERS)

        def forward(self, last: Any, state: Any) -> tuple[Any, Any]:
            """Last symbols (B,) (SOS = none yet) → (B, 320) and the new LSTM state."""
            embedded = self.embed(last.clamp(min=0)) * (last >= 0).unsqueeze(1)
            out, state = self.dec_rnn(embedded.unsqueeze(0), state)
            return out[0], state

    class Joint(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(ENCODER_HIDDEN + PRED_HIDDEN, JOINT_HIDDEN), nn.ReLU(),
                                     nn.Dropout(DROPOUT), nn.Linear(JOINT_HIDDEN, NUM_CLASSES))

        def forward(self, f: Any, g: Any) -> Any:
            return self.net(torch.cat([f, g], dim=-1))

    class RNNT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = Encoder()
            self.prediction = Prediction()
            self.joint = Joint()

    return RNNT().eval()
