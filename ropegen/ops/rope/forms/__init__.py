"""The forms of rope's settings, one row each: scaling forms (scaling.py), position forms
(position.py), angle forms and angle numerics (angle.py).

A row says how the spec writes the form (its word and arguments with defaults), validates it (the
checks and diagnostics, same codes everywhere), builds its IR, and names what later stages do with
it. The checker, the planner, the reference, the input makers, the bench and its peers find a form by
its row (`scaling_of`, `position_of`, `angles_of`, `numerics_of`), never by testing its type. A new
scaling form is its IR record and its row in scaling.py plus its reference formula; a new position
form is its ir.PositionKind member and its row in position.py (plus its reference streams and, if it
has inputs of its own, its draw functions).
"""
from __future__ import annotations

from ropegen.ops.rope.forms.angle import (ANGLE_WORDS, ANGLES, NUMERICS, AngleForm, NumericsForm,  # noqa: F401
                                          angle_named, angles_of, numerics_of)
from ropegen.ops.rope.forms.position import (ABSENT_POSITIONS, POSITION_SYNOPSIS, POSITION_WORDS,  # noqa: F401
                                             POSITIONS, PositionForm, batch_vector, mrope_stream,
                                             position_of, position_written)
from ropegen.ops.rope.forms.scaling import (IR_NAMES, SCALINGS, Arg, GgmlYarnScaling, LinearScaling,  # noqa: F401
                                            Llama3Scaling, NoScaling, Scaling, ScalingForm,
                                            check_scaling, scaling_of)
