"""An MLP on sklearn's digits: the PyTorch beginner's script.

TensorDataset + DataLoader, nn.Sequential, CrossEntropyLoss, Adam, then an accuracy
computed with ``torch.max`` in ``model.eval()`` under ``torch.no_grad()``.

Determinism, so that two runs (or two libraries) can be compared step by step:
- the initial weights: ``INIT=path`` loads them with ``load_state_dict(torch.load(path))``;
  ``SAVE_INIT=path`` saves the freshly built model's weights there first;
- the data order: the split and the shuffling come from NumPy's ``default_rng(SEED)``,
  one permutation per epoch, and the DataLoader reads the permuted tensors in order
  (``shuffle=False``), so no torch random number decides anything;
- no dropout.
``LOSSES=path`` writes {"losses": [one per step], "metric": test accuracy} as JSON.
"""

import json
import os

import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.metrics import confusion_matrix
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
EPOCHS = 2
BATCH_SIZE = 60  # 1500 training images: 25 steps per epoch, 50 in all

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(SEED)
rng = np.random.default_rng(SEED)

images, labels = load_digits(return_X_y=True)
images = (images / 16.0).astype(np.float32)
labels = labels.astype(np.int64)
split = rng.permutation(len(images))
train_idx, test_idx = split[:1500], split[1500:]
x_test = torch.from_numpy(images[test_idx])
y_test = torch.from_numpy(labels[test_idx])

model = nn.Sequential(
    nn.Linear(64, 128),
    nn.ReLU(),
    nn.Linear(128, 64),
    nn.Tanh(),
    nn.Linear(64, 10),
)
if os.environ.get("SAVE_INIT"):
    torch.save(model.state_dict(), os.environ["SAVE_INIT"])
if os.environ.get("INIT"):
    model.load_state_dict(torch.load(os.environ["INIT"]))
model = model.to(device)
print(model)

criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

losses = []
step = 0
for epoch in range(EPOCHS):
    order = train_idx[rng.permutation(len(train_idx))]
    dataset = TensorDataset(torch.tensor(images[order]), torch.tensor(labels[order]))
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=False)
    model.train()
    running_loss = 0.0
    correct = 0
    total = 0
    for inputs, targets in loader:
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad()
        outputs = model(inputs)
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()

        step += 1
        losses.append(loss.item())
        print(f"step {step} loss {loss.item()!r}")
        running_loss += loss.item() * inputs.size(0)
        _, predicted = torch.max(outputs, 1)
        total += targets.size(0)
        correct += (predicted == targets).sum().item()
    print(
        f"epoch {epoch + 1}: loss {running_loss / total:.4f}, "
        f"train accuracy {100 * correct / total:.2f}% (last batch loss {loss:.4f})"
    )

model.eval()
correct = 0
total = 0
with torch.no_grad():
    outputs = model(x_test.to(device))
    _, predicted = torch.max(outputs, 1)
    total += y_test.size(0)
    correct += (predicted == y_test.to(device)).sum().item()
accuracy = correct / total
print(f"test accuracy: {100 * accuracy:.2f}% ({correct}/{total})")
print(confusion_matrix(y_test.numpy(), predicted.cpu().numpy()))
assert accuracy > 0.85, accuracy

if os.environ.get("LOSSES"):
    with open(os.environ["LOSSES"], "w") as f:
        json.dump({"losses": losses, "metric": accuracy}, f)
