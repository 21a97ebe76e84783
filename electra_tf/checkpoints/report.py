"""Loading named weights into variables, with a report of what was loaded, missing and unused.

Weights are keyed by the original release's TF1 variable names (docs/fidelity.md#checkpoint-names) without ":0", e.g.
`electra/encoder/layer_0/attention/self/query/kernel`; this project's variables carry the same
names, so a variable and its weight meet by name alone.
"""

import dataclasses
from typing import Dict, Iterable, List, Sequence, Union

import numpy as np
import tensorflow as tf

from electra_tf.errors import InputError

GLOBAL_STEP = "global_step"
SLOT_SUFFIXES = ("/adam_m", "/adam_v")


def variable_name(variable: tf.Variable) -> str:
    """The TF1 name of a variable: its name without the ":0" output suffix."""
    name = variable.name
    return name[: name.rindex(":")] if ":" in name else name


@dataclasses.dataclass
class LoadReport:
    """What a load did: every name sorted; `missing` are variables the source did not have (left
    as initialised), `unused` are source weights no variable took."""

    loaded: List[str]
    missing: List[str]
    unused: List[str]

    def summary(self) -> str:
        """A few lines for a terminal: counts, then the missing and unused names (or groups)."""
        lines = [f"loaded {len(self.loaded)} variables, missing {len(self.missing)}, "
                 f"unused {len(self.unused)}"]
        for title, names in (("missing (left as initialised)", self.missing),
                             ("unused (in the source, not in the model)", self.unused)):
            if names:
                lines.append(f"{title}:")
                lines.extend(f"  {line}" for line in _grouped(names))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _grouped(names: Sequence[str]) -> List[str]:
    """Names folded by top scope (and optimizer slot) with a count: `electra/*/adam_m (39 variables)`."""
    groups: Dict[str, List[str]] = {}
    for name in names:
        slot = next((suffix for suffix in SLOT_SUFFIXES if name.endswith(suffix)), "")
        groups.setdefault(f"{name.split('/', 1)[0]}/*{slot}", []).append(name)
    return [members[0] if len(members) == 1 else f"{pattern} ({len(members)} variables)"
            for pattern, members in sorted(groups.items())]


def assign_weights(variables: Iterable[tf.Variable], values: Dict[str, np.ndarray],
                   required_prefix: Union[str, Sequence[str], None] = "") -> LoadReport:
    """Assigns `values[name]` to each variable of that TF1 name.

    A variable missing from `values` is an InputError when its name starts with
    `required_prefix` (a string or a sequence of them; "" = every variable is required, None =
    none is), else it keeps its value and is listed as missing. A shape mismatch is always an
    InputError naming the variable and both shapes. Nothing is assigned unless all checks pass.
    """
    prefixes = () if required_prefix is None else (
        (required_prefix,) if isinstance(required_prefix, str) else tuple(required_prefix))
    pending, missing, seen = [], [], set()
    for variable in variables:
        name = variable_name(variable)
        if name in seen:  # a shared variable listed twice (tied embeddings)
            continue
        seen.add(name)
        if name not in values:
            if any(name.startswith(prefix) for prefix in prefixes):
                raise InputError(f"the checkpoint lacks the required variable {name} "
                                 f"(shape {variable.shape.as_list()})")
            missing.append(name)
            continue
        value = np.asarray(values[name])
        if list(value.shape) != variable.shape.as_list():
            raise InputError(f"variable {name}: the checkpoint has shape {list(value.shape)}, "
                             f"the model has shape {variable.shape.as_list()}")
        pending.append((variable, value))
    for variable, value in pending:
        variable.assign(value.astype(variable.dtype.as_numpy_dtype))
    loaded = sorted(variable_name(v) for v, _ in pending)
    unused = sorted(set(values) - seen)
    return LoadReport(loaded=loaded, missing=sorted(missing), unused=unused)
