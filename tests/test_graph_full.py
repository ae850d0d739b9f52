"""The engine in full: higher-order gradients, pl.graph.grad, functional transforms, hooks,
custom Functions, in-place safety, anomaly detection, inference mode, pictures, memory."""

from __future__ import annotations

import gc
import shutil
import weakref

import numpy as np
import pytest

import pylucid as pl
from pylucid.graph import AnomalyError, InplaceModifiedError


def f64(values, **kwargs) -> pl.Tensor:
    return pl.tensor(values, dtype=pl.float64, **kwargs)


# -- higher-order gradients -----------------------------------------------------------------
def test_second_derivative_through_grad(device: str) -> None:
    x = f64([0.5, 2.0, 3.0], device=device, requires_grad=True)
    y = (pl.log2(x) * x).sum()  # dy/dx = log2 x + 1/ln2, d2y/dx2 = 1/(x ln 2)
    (g,) = pl.graph.grad(y, x, create_graph=True)
    assert g.grad_fn is not None and x.grad is None  # grad() leaves .grad alone
    (h,) = pl.graph.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), 1 / (np.array([0.5, 2, 3]) * np.log(2)), rtol=1e-14)


def test_backward_create_graph_leaves_a_differentiable_grad() -> None:
    x = f64([1.0, 2.0], requires_grad=True)
    (x * x * x).sum().backward(create_graph=True)
    assert x.grad.grad_fn is not None
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 12.0])
    (h,) = pl.graph.grad(x.grad.sum(), x)
    np.testing.assert_allclose(h.numpy(), [6.0, 12.0])


def test_grad_allow_unused_and_errors() -> None:
    x, unused = f64([1.0], requires_grad=True), f64([1.0], requires_grad=True)
    y = (x * 2.0).sum()
    with pytest.raises(RuntimeError, match=r"inputs\[1\] .* not used.*allow_unused=True"):
        pl.graph.grad(y, [x, unused], retain_graph=True)
    gx, gu = pl.graph.grad(y, [x, unused], allow_unused=True)
    assert gx.item() == 2.0 and gu is None
    with pytest.raises(RuntimeError, match="does not require grad"):
        pl.graph.grad(y, f64([1.0]))


def test_grad_of_non_leaf_input() -> None:
    x = f64([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    y = (h * h).sum()
    (gh,) = pl.graph.grad(y, h)
    np.testing.assert_allclose(gh.numpy(), [6.0, 12.0])


def test_op_without_graph_formula_names_itself() -> None:
    class Opaque(pl.graph.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

        @staticmethod
        def backward(ctx, g):
            return g * 2.0

    x = f64([1.0], requires_grad=True)
    y = (Opaque.apply(x) * x).sum()
    (g,) = pl.graph.grad(y, x, create_graph=True)  # Function backward is recorded
    assert g.item() == 4.0


# -- functional transforms ------------------------------------------------------------------
def test_value_and_grad_vjp_jacobian_hessian(device: str) -> None:
    x = f64([1.0, 2.0, 3.0], device=device)
    cube = lambda t: (t * t * t).sum()  # noqa: E731
    value, gradient = pl.graph.value_and_grad(cube)(x)
    assert value.item() == 36.0
    np.testing.assert_allclose(gradient.numpy(), [3.0, 12.0, 27.0])
    outputs, (product,) = pl.graph.vjp(lambda t: t * t, [x], [f64([1.0, 0.5, 2.0], device=device)])
    np.testing.assert_allclose(outputs[0].numpy(), [1.0, 4.0, 9.0])
    np.testing.assert_allclose(product.numpy(), [2.0, 2.0, 12.0])
    np.testing.assert_allclose(pl.graph.jacobian(lambda t: t * t, x).numpy(), np.diag([2, 4, 6.0]))
    np.testing.assert_allclose(pl.graph.hessian(cube, x).numpy(), np.diag([6, 12, 18.0]))
    assert x.grad is None and not x.requires_grad  # the arguments are left alone


def test_value_and_grad_argnums_tuple() -> None:
    a, b = f64([2.0]), f64([5.0])
    value, (ga, gb) = pl.graph.value_and_grad(lambda u, v: (u * v).sum(), argnums=(0, 1))(a, b)
    assert value.item() == 10.0 and ga.item() == 5.0 and gb.item() == 2.0


# -- hooks ----------------------------------------------------------------------------------
def test_hook_sees_and_replaces_the_gradient_and_is_removable() -> None:
    x = f64([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    seen = []
    handle = h.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 10.0)
    h.sum().backward(retain_graph=True)
    np.testing.assert_array_equal(seen[0], [1.0, 1.0])
    np.testing.assert_array_equal(x.grad.numpy(), [30.0, 30.0])
    handle.remove()
    x.grad = None
    h.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_leaf_hook_runs_before_accumulation() -> None:
    x = f64([1.0], requires_grad=True)
    x.register_hook(lambda g: g * 0.5)
    (x * 4.0).sum().backward()
    assert x.grad.item() == 2.0


def test_retain_grad_keeps_a_non_leaf_gradient() -> None:
    x = f64([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    h.retain_grad()
    assert h.retains_grad
    (h * h).sum().backward()
    np.testing.assert_array_equal(h.grad.numpy(), [6.0, 12.0])


def test_post_accumulate_hook_sees_the_new_grad() -> None:
    x = f64([1.0], requires_grad=True)
    seen = []
    x.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.item()))
    (x * 2.0).sum().backward()
    (x * 2.0).sum().backward()
    assert seen == [2.0, 4.0]


# -- custom Function ------------------------------------------------------------------------
class Cube(pl.graph.Function):
    r"""Test op :math:`y = x^3`, gradient :math:`3 x^2 g`."""

    schema_v1 = pl.ops.OpSchema(name="test_cube", amp_policy=pl.ops.AmpPolicy.FORCE_FP32)

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3.0 * x * x


def test_custom_function_gradients_and_registry(device: str) -> None:
    x = f64([1.0, 2.0], device=device, requires_grad=True)
    y = Cube.apply(x)
    assert y.grad_fn.name == "CubeBackward"
    assert pl.graph.gradcheck(Cube.apply, [x])
    assert pl.graph.gradgradcheck(Cube.apply, [x])
    assert pl.ops.get_op("test_cube") is Cube
    from pylucid import opdocs

    row = next(r for r in opdocs.render(library_only=False).splitlines() if "`test_cube`" in r)
    assert "FORCE_FP32" in row and "`test_cube`" not in opdocs.render()


def test_custom_function_follows_autocast_policy() -> None:
    x = pl.tensor([1.0, 2.0], dtype=pl.bfloat16, requires_grad=True)
    with pl.autocast():
        y = Cube.apply(x)
    assert y.dtype is pl.float32  # FORCE_FP32
    y.sum().backward()
    assert x.grad.dtype is pl.bfloat16


def test_custom_function_bad_backward_is_reported() -> None:
    class Wrong(pl.graph.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            return g.sum()

    x = f64([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"Wrong.backward: the gradient of argument 0 has shape"):
        Wrong.apply(x).sum().backward()


def test_needs_input_grad_skips_unneeded_gradients() -> None:
    seen = []

    class Spy(pl.graph.Function):
        @staticmethod
        def forward(ctx, a, b):
            seen.append(ctx.needs_input_grad)
            return a * b

        @staticmethod
        def backward(ctx, g):
            return (g if ctx.needs_input_grad[0] else None), None

    Spy.apply(f64([1.0], requires_grad=True), f64([2.0])).sum().backward()
    assert seen == [(True, False)]
    a, b = f64([3.0], requires_grad=True), f64([4.0])
    node = (a * b).grad_fn
    assert node.needs_input_grad == (True, False)
    assert node.grad_formula(np.ones(1))[1] is None  # the built-in ops skip it too


# -- in-place safety ------------------------------------------------------------------------
def test_inplace_ops_values(device: str) -> None:
    x = f64([1.0, 2.0, 3.0], device=device)
    x.add_(1.0).mul_(2.0).sub_(f64([1.0, 1.0, 1.0], device=device)).div_(2.0)
    np.testing.assert_array_equal(x.numpy(), [1.5, 2.5, 3.5])
    x.zero_()
    np.testing.assert_array_equal(x.numpy(), [0.0, 0.0, 0.0])
    x.copy_(f64([7.0], device=device))
    np.testing.assert_array_equal(x.numpy(), [7.0, 7.0, 7.0])


def test_inplace_on_leaf_requiring_grad_raises_at_once() -> None:
    x = f64([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="add_: x is a leaf tensor that requires grad"):
        x.add_(1.0)
    with pl.no_grad():
        x.add_(1.0)  # a parameter update
    assert x.item() == 2.0


def test_modifying_a_saved_tensor_raises_at_backward() -> None:
    x = f64([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    y = pl.log2(h).sum()
    h.add_(1.0)
    with pytest.raises(InplaceModifiedError, match=r"Log2Backward.*'x'.*version 0 .* now 1"):
        y.backward()


def test_inplace_keeps_gradients_right(device: str) -> None:
    x = f64([1.0, 2.0, 3.0], device=device, requires_grad=True)
    y = x * 2.0
    y.mul_(y)  # (2x)^2: the mul_ node keeps a private copy of y's old values
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [8.0, 16.0, 24.0])


def test_inplace_through_a_detached_alias_bumps_the_version() -> None:
    x = f64([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    x.detach().add_(1.0)  # shares memory and version counter with x
    with pytest.raises(InplaceModifiedError, match="MulBackward"):
        y.backward()


def test_inplace_shape_and_dtype_errors() -> None:
    with pytest.raises(ValueError, match=r"add_: the result has shape \(2, 3\).*\(3,\)"):
        pl.zeros(3).add_(pl.zeros(2, 3))
    with pytest.raises(TypeError, match="float32, which cannot be stored in place into a int64"):
        pl.zeros(3, dtype=pl.int64).add_(0.5)


# -- anomaly detection and inference mode ---------------------------------------------------
def test_detect_anomaly_names_the_node_and_the_call_site() -> None:
    x = f64([0.0, 1.0], requires_grad=True)
    with pl.graph.detect_anomaly():
        y = pl.sqrt(x).sum()  # the gradient 1/(2 sqrt 0) is inf
        with pytest.raises(AnomalyError, match=r"SqrtBackward.*nan or inf(.|\n)*test_graph_full"):
            y.backward()
    pl.sqrt(f64([0.0], requires_grad=True)).sum().backward()  # off: no error


def test_inference_mode() -> None:
    w = f64([1.0], requires_grad=True)
    assert pl.inference_mode is pl.graph.inference_mode
    with pl.inference_mode():
        a = w * 2.0
        assert a.grad_fn is None and a.is_inference()
    assert not pl.tensor([1.0]).is_inference()
    with pytest.raises(RuntimeError, match="mul: b is an inference tensor"):
        w * a
    with pytest.raises(RuntimeError, match="inference tensor"):
        a.add_(1.0)


# -- pictures -------------------------------------------------------------------------------
def test_to_dot_shows_nodes_shapes_dtypes_and_saved_values() -> None:
    x = pl.tensor([1.0, 2.0], requires_grad=True)
    w = pl.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    text = pl.graph.to_dot(pl.log2(x @ w).sum())
    assert text.startswith('digraph "pylucid" {') and text.rstrip().endswith("}")
    for fragment in (
        "SumBackward",
        "Log2Backward\\n(2,) float32\\nsaved: x (2,)",
        "MatmulBackward",
        "saved: a (2,), b (2, 2)",
        "AccumulateGrad\\nleaf (2, 2) float32",
        "-> output",
    ):
        assert fragment in text
    assert text.count("->") == 5


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not installed")
def test_render_writes_svg(tmp_path) -> None:
    x = pl.tensor([1.0, 2.0], requires_grad=True)
    path = pl.graph.render(pl.log2(x).sum(), tmp_path / "graph.svg")
    assert path.read_text().lstrip().startswith(("<?xml", "<svg"))


def test_render_without_graphviz_says_how_to_get_it(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    x = pl.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="apt-get install graphviz"):
        pl.graph.render(pl.log2(x).sum(), tmp_path / "graph.svg")


# -- memory ---------------------------------------------------------------------------------
def test_deleted_loss_frees_its_graph_at_once() -> None:
    x = pl.tensor(np.ones(1000), requires_grad=True)
    loss = pl.log2(x * 2.0).sum()
    node = weakref.ref(loss.grad_fn)
    del loss
    assert node() is None  # freed by reference counting: no cycle holds the graph


def test_backward_frees_saved_values() -> None:
    x = pl.tensor(np.ones(1000), requires_grad=True)
    h = x * 2.0
    saved = weakref.ref(h._storage)
    loss = pl.log2(h).sum()
    del h
    loss.backward()
    assert saved() is None  # Log2Backward released the only other reference to it


def test_training_memory_does_not_grow() -> None:
    rng = np.random.default_rng(0)
    x = pl.tensor(rng.standard_normal((64, 8)))
    y = pl.tensor(rng.integers(0, 3, 64))
    rows = pl.arange(64)
    w = pl.tensor(rng.standard_normal((8, 3)) * 0.1, requires_grad=True)
    optimizer = pl.optim.SGD([w], lr=0.1)

    def step() -> None:
        optimizer.zero_grad()
        loss = -pl.log_softmax(x @ w, axis=1)[rows, y].mean()
        loss.backward()
        optimizer.step()

    def live_nodes() -> int:
        gc.collect()
        return sum(issubclass(type(o), pl.graph.Node) for o in gc.get_objects())

    for _ in range(50):
        step()
    before = live_nodes()
    for _ in range(1000):
        step()
    assert live_nodes() <= before


def test_backward_refuses_a_gradient_that_is_not_a_tensor() -> None:
    x = pl.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match=r"gradient for tensors\[0\] must be a Tensor"):
        pl.log2(x).backward(np.ones(2))
