"""The layer modules of :mod:`pylucid.nn`, one module per family (as ``torch.nn.modules``)."""

from pylucid.nn.modules.activation import (
    ELU,
    GELU,
    LeakyReLU,
    LogSoftmax,
    MultiheadAttention,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Tanh,
)
from pylucid.nn.modules.container import ModuleDict, ModuleList, Sequential
from pylucid.nn.modules.conv import Conv1d, Conv2d
from pylucid.nn.modules.dropout import Dropout
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
from pylucid.nn.modules.normalization import BatchNorm1d, BatchNorm2d, LayerNorm
from pylucid.nn.modules.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from pylucid.nn.modules.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from pylucid.nn.modules.sparse import Embedding
from pylucid.nn.modules.transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "ELU", "GELU", "GRU", "LSTM", "RNN", "AdaptiveAvgPool2d", "AvgPool2d", "BCELoss",
    "BCEWithLogitsLoss", "BatchNorm1d", "BatchNorm2d", "Conv1d", "Conv2d", "CrossEntropyLoss",
    "Dropout", "Embedding", "Flatten", "GRUCell", "Identity", "L1Loss", "LSTMCell", "LayerNorm",
    "LeakyReLU", "Linear", "LogSoftmax", "MSELoss", "MaxPool2d", "Module", "ModuleDict",
    "ModuleList", "MultiheadAttention", "NLLLoss", "RNNBase", "RNNCell", "RNNCellBase", "ReLU",
    "SiLU", "Sequential", "Sigmoid", "SmoothL1Loss", "Softmax", "Softplus", "Tanh",
    "Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
    "TransformerEncoderLayer", "Unflatten",
]  # fmt: skip
