"""Layer-wise learning-rate decay for fine-tuning (the original release's `optimization.py`).

Lower layers get smaller learning rates: a variable at depth d is updated with
`lr_t * decay ** (top - d)`, where the depth is read from the variable's name with the original
release's substring keys:

    "/embeddings/", "/embeddings_project/"   depth 0
    "encoder/layer_{i}/"                     depth i + 1      (i = 0 .. n_layers - 1)
    "task_specific/"                         depth n_layers + 2

Original rule (the default, `fixed=False`): `multiplier = decay ** (n_layers + 2 - depth)`. The
exponent still counts the pooler that ELECTRA removed, so the top encoder layer gets `decay**2`
instead of `decay**1` (acknowledged upstream as a bug in google-research/electra#51 and #64, never
fixed). Example with 12 layers and decay 0.8: embeddings 0.8**14 ~= 0.044, layer_11 0.8**2,
task_specific 1.0.

Corrected rule (`fixed=True`): the heads sit directly on the top layer, i.e. `task_specific/` gets
depth n_layers + 1, and `multiplier = decay ** (n_layers + 1 - depth)`. Embeddings get
decay**(n_layers + 1), encoder layer i gets decay**(n_layers - i) (the top layer decay**1), the
heads 1.0. Every multiplier is the original's divided by `decay`, except the heads' (1.0 in both).

The multiplier scales the whole update, weight decay included, as in the original.
"""

import re
from collections.abc import Iterable

_OUTPUT_INDEX = re.compile(r":\d+$")
EMBEDDING_SCOPES = ("embeddings", "embeddings_project")  # depth 0, found as "/<scope>/" in a name


def base_name(name: str) -> str:
    """A variable name without its output index: `a/b/kernel:0` -> `a/b/kernel` (TF1 op name)."""
    return _OUTPUT_INDEX.sub("", name)


def _depth_keys(n_layers: int, fixed: bool) -> dict[str, int]:
    """The original's substring -> depth table, with the heads one level lower under `fixed`."""
    keys = {f"/{scope}/": 0 for scope in EMBEDDING_SCOPES}
    keys.update({f"encoder/layer_{i}/": i + 1 for i in range(n_layers)})
    keys["task_specific/"] = n_layers + 1 if fixed else n_layers + 2
    return keys


def layer_depth(variable_name: str, n_layers: int, fixed: bool = False) -> int:
    """Depth of a variable in the network, from its name (see the module docstring).

    Raises ValueError naming the variable when its name contains none of the keys, or more than
    one (the original would then have applied its update once per matching key).
    """
    if n_layers is None or int(n_layers) < 1:
        raise ValueError(f"layer-wise LR decay needs n_layers >= 1, got {n_layers!r}")
    name = base_name(variable_name)
    keys = _depth_keys(int(n_layers), fixed)
    matches = [key for key in keys if key in name]
    if not matches:
        raise ValueError(
            f"No layer-wise learning rate for variable {name!r}: its name contains none of "
            f"'/embeddings/', '/embeddings_project/', 'encoder/layer_<i>/' (i < {n_layers}), "
            "'task_specific/'"
        )
    if len(matches) > 1:
        raise ValueError(f"Variable {name!r} matches several layer-wise LR keys: {matches}")
    return keys[matches[0]]


def lr_multiplier(variable_name: str, n_layers: int, decay: float, fixed: bool = False) -> float:
    """The factor applied to the scheduled learning rate for one variable."""
    top = n_layers + 1 if fixed else n_layers + 2
    return float(decay) ** (top - layer_depth(variable_name, n_layers, fixed))


def lr_multiplier_table(
    variables: Iterable, n_layers: int, decay: float, fixed: bool = False
) -> dict[str, float]:
    """{variable name without `:0`: multiplier} for variables (tf.Variable objects or names)."""
    table = {}
    for variable in variables:
        name = base_name(variable if isinstance(variable, str) else variable.name)
        table[name] = lr_multiplier(name, n_layers, decay, fixed)
    return table
