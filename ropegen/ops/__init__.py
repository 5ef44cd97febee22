"""Operator kinds as vertical slices: everything that knows what an operator means (forms, checks, plan, reference, inputs, explain)."""
