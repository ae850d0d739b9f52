"""The layer modules of :mod:`pylucid.nn`, one module per family (as ``torch.nn.modules``)."""

from pylucid import _lazy
from pylucid.nn.modules.activation import (
    ELU,
    GELU,
    GLU,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    MultiheadAttention,
    PReLU,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Softsign,
    Tanh,
    Tanhshrink,
)
from pylucid.nn.modules.container import (
    ModuleDict,
    ModuleList,
    ParameterDict,
    ParameterList,
    Sequential,
)
from pylucid.nn.modules.conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d
from pylucid.nn.modules.dropout import Dropout, Dropout1d, Dropout2d, Dropout3d
from pylucid.nn.modules.fold import Fold, Unfold
from pylucid.nn.modules.instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from pylucid.nn.modules.linear import Flatten, Identity, Linear, Unflatten
from pylucid.nn.modules.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from pylucid.nn.modules.module import Module
from pylucid.nn.modules.normalization import BatchNorm1d, BatchNorm2d, LayerNorm, RMSNorm
from pylucid.nn.modules.padding import (
    CircularPad1d,
    CircularPad2d,
    CircularPad3d,
    ConstantPad1d,
    ConstantPad2d,
    ConstantPad3d,
    ReflectionPad1d,
    ReflectionPad2d,
    ReflectionPad3d,
    ReplicationPad1d,
    ReplicationPad2d,
    ReplicationPad3d,
    ZeroPad1d,
    ZeroPad2d,
    ZeroPad3d,
)
from pylucid.nn.modules.pixelshuffle import PixelShuffle, PixelUnshuffle
from pylucid.nn.modules.pooling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AvgPool1d,
    AvgPool2d,
    MaxPool1d,
    MaxPool2d,
)
from pylucid.nn.modules.sparse import Embedding
from pylucid.nn.modules.upsampling import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d

#: Layers imported on first use (:mod:`pylucid._lazy`): name -> its module.
_LAZY = {
    **dict.fromkeys(
        ("GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase"),
        "pylucid.nn.modules.rnn",
    ),
    **dict.fromkeys(
        (
            "Transformer",
            "TransformerDecoder",
            "TransformerDecoderLayer",
            "TransformerEncoder",
            "TransformerEncoderLayer",
        ),
        "pylucid.nn.modules.transformer",
    ),
}
_lazy.lazy_attributes(
    globals(),
    {
        "rnn": "pylucid.nn.modules.rnn",
        "transformer": "pylucid.nn.modules.transformer",
        **{name: f"{module}:{name}" for name, module in _LAZY.items()},
    },
)

__all__ = [
    "ELU", "GELU", "GLU", "GRU", "LSTM", "RNN", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
    "AvgPool1d", "AvgPool2d", "BCELoss", "BCEWithLogitsLoss", "BatchNorm1d", "BatchNorm2d",
    "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d",
    "ConstantPad3d", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "CrossEntropyLoss", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "Embedding",
    "Flatten", "Fold", "GRUCell", "Hardsigmoid", "Hardswish", "Hardtanh", "Identity",
    "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "L1Loss", "LSTMCell", "LayerNorm",
    "LeakyReLU", "Linear", "LogSigmoid", "LogSoftmax", "MSELoss", "MaxPool1d", "MaxPool2d",
    "Mish", "Module", "ModuleDict", "ModuleList", "MultiheadAttention", "NLLLoss", "PReLU",
    "ParameterDict", "ParameterList", "PixelShuffle", "PixelUnshuffle", "RMSNorm", "RNNBase",
    "RNNCell", "RNNCellBase", "ReLU", "ReLU6", "ReflectionPad1d", "ReflectionPad2d",
    "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "SiLU",
    "Sequential", "Sigmoid", "SmoothL1Loss", "Softmax", "Softplus", "Softsign", "Tanh",
    "Tanhshrink", "Transformer", "TransformerDecoder", "TransformerDecoderLayer",
    "TransformerEncoder", "TransformerEncoderLayer", "Unflatten", "Unfold", "Upsample",
    "UpsamplingBilinear2d", "UpsamplingNearest2d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
]  # fmt: skip
