"""A small CNN on sklearn's 8x8 digits, checkpointed and resumed: the PyTorch routine.

Conv2d, BatchNorm2d, ReLU, MaxPool2d, Dropout, Flatten, Linear; SGD with momentum and a
StepLR; ``torch.save`` of {"model", "optimizer", "scheduler", "epoch"}; then a fresh model,
optimizer and scheduler ``load_state_dict(torch.load(path, map_location="cpu",
weights_only=True))``, whose evaluation must equal the trained model's exactly, and which
must resume training exactly as the trained model continues.

Determinism, so that two runs (or two libraries) can be compared step by step:
- the initial weights: ``INIT=path`` loads them with ``load_state_dict(torch.load(path))``;
  ``SAVE_INIT=path`` saves the freshly built model's weights there first;
- the data order: the split and each epoch's shuffling come from NumPy's
  ``default_rng(SEED)`` (a permutation per epoch, given to the DataLoader's dataset in
  order, ``shuffle=False``);
- Dropout's p is 0: a mask would come from the library's own generator.
``LOSSES=path`` writes {"losses": [one per step], "metric": [test accuracy, test loss]}.
``CHECKPOINT=path`` says where the checkpoint goes (default: checkpoint.pt here).
"""

import json
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from sklearn.datasets import load_digits
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
EPOCHS = 5
BATCH_SIZE = 150  # 1500 training images: 10 steps per epoch, 50 in all
DROPOUT = 0.0  # (p > 0 draws the library's random numbers: the runs would not compare)

torch.manual_seed(SEED)
rng = np.random.default_rng(SEED)

images, labels = load_digits(return_X_y=True)
images = (images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
labels = labels.astype(np.int64)
split = rng.permutation(len(images))
train_idx, test_idx = split[:1500], split[1500:]
x_test = torch.from_numpy(images[test_idx])
y_test = torch.from_numpy(labels[test_idx])


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, kernel_size=3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Dropout(p=DROPOUT),
            nn.Linear(16 * 2 * 2, 32),
            nn.ReLU(),
            nn.Linear(32, num_classes),
        )

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        return self.classifier(self.features(x))


def make(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    scheduler = StepLR(optimizer, step_size=2, gamma=0.5)
    return optimizer, scheduler


def train_step(model, optimizer, inputs, targets):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return loss


def evaluate(model):
    model.eval()
    with torch.no_grad():
        outputs = model(x_test)
        loss = F.cross_entropy(outputs, y_test).item()
        probabilities = torch.softmax(outputs, dim=1)
        confidence, predicted = probabilities.max(dim=1)
        correct = (predicted == y_test).sum().item()
    print(f"mean confidence {confidence.mean().item():.3f}")
    return outputs, correct / len(y_test), loss


model = Net()
if os.environ.get("SAVE_INIT"):
    torch.save(model.state_dict(), os.environ["SAVE_INIT"])
if os.environ.get("INIT"):
    model.load_state_dict(torch.load(os.environ["INIT"]))
optimizer, scheduler = make(model)

losses = []
step = 0
for epoch in range(EPOCHS):
    order = train_idx[rng.permutation(len(train_idx))]
    loader = DataLoader(
        TensorDataset(torch.from_numpy(images[order]), torch.from_numpy(labels[order])),
        batch_size=BATCH_SIZE,
    )
    model.train()
    for inputs, targets in loader:
        loss = train_step(model, optimizer, inputs, targets)
        step += 1
        losses.append(loss.item())
        lr = optimizer.param_groups[0]["lr"]
        print(f"step {step} loss {loss.item()!r} (epoch {epoch + 1}, lr {lr})")
    scheduler.step()

path = os.environ.get("CHECKPOINT", "checkpoint.pt")
torch.save(
    {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "epoch": epoch,
    },
    path,
)

outputs, accuracy, test_loss = evaluate(model)
print(f"test accuracy {100 * accuracy:.2f}%, test loss {test_loss:.4f}")
assert accuracy > 0.85, accuracy

restored = Net()
restored_optimizer, restored_scheduler = make(restored)
checkpoint = torch.load(path, map_location="cpu", weights_only=True)
restored.load_state_dict(checkpoint["model"])
restored_optimizer.load_state_dict(checkpoint["optimizer"])
restored_scheduler.load_state_dict(checkpoint["scheduler"])
assert checkpoint["epoch"] == EPOCHS - 1, checkpoint["epoch"]
assert restored_scheduler.get_last_lr() == scheduler.get_last_lr()

restored_outputs, restored_accuracy, restored_loss = evaluate(restored)
assert torch.equal(restored_outputs, outputs), "the loaded model computes something else"
assert (restored_accuracy, restored_loss) == (accuracy, test_loss)

# Resuming: the trained model and the restored one take the same three steps.
inputs = torch.from_numpy(images[train_idx[:BATCH_SIZE]])
targets = torch.from_numpy(labels[train_idx[:BATCH_SIZE]])
model.train()
restored.train()
for _ in range(3):
    expected = train_step(model, optimizer, inputs, targets).item()
    got = train_step(restored, restored_optimizer, inputs, targets).item()
    assert got == expected, (got, expected)
for (name, p), q in zip(model.state_dict().items(), restored.state_dict().values()):
    assert torch.equal(p, q), name
print(f"the restored model resumes exactly (loss {got:.4f})")

if os.environ.get("LOSSES"):
    with open(os.environ["LOSSES"], "w") as f:
        json.dump({"losses": losses, "metric": [accuracy, test_loss]}, f)
