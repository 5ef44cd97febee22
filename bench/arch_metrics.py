"""Architecture metrics of a ropegen tree: lines per target (Python + templates), lines shared by every
target, dispatch sites on operator / angle / position kind, the largest modules, template if-nesting.

    python bench/arch_metrics.py [TREE]      (TREE: a checkout or `git archive` export; default: here)

The patterns also match the module names of trees before the issue-9 refactor, so a before/after pair
compares like with like.
"""
import re, sys, pathlib, collections
root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
def lines(p): return sum(1 for _ in open(p))
py = sorted(root.glob("ropegen/**/*.py"))
tpl = sorted(root.glob("templates/**/*.j2"))
def tgt(paths, pats): return sum(lines(p) for p in paths if any(re.search(x, str(p.relative_to(root))) for x in pats))
targets = {
 "numpy": (["backends/numpy(_backend)?\\.py$"], ["templates/numpy/"]),
 "c": (["backends/c_backend\\.py$", "ropegen/cbuild\\.py$", "backends/c/"], ["templates/c/"]),
 "cuda": (["backends/cuda_backend\\.py$", "ropegen/cuda_plan\\.py$", "ropegen/nvrtc\\.py$", "ropegen/cuda_bench\\.py$", "backends/cuda/"], ["templates/cuda/"]),
 "shared lower+runtime (any target)": (["ropegen/lower/", "ropegen/runtime/", "ropegen/aliasing\\.py$"], ["templates/gpu/"]),
}
for t, (pp, tp) in targets.items():
    a, b = tgt(py, pp), tgt(tpl, tp)
    print(f"{t:36s} python {a:5d}  templates {b:5d}  total {a+b:5d}")
PAT = {
 "operator kind": r"isinstance\([^)]*\b(RopePlan|RmsNormPlan|RopeOp|RmsNormOp)\b|(==|!=)\s*[\"'](rope|rmsnorm)[\"']",
 "angle kind": r"isinstance\([^)]*\b(TableAnglesPlan|ExactAngles|GgmlAngles|TableAngles|ComputedAngles|AnglesPlan)\b|(angles_kind|angle_mode|angles\.kind)\s*(==|!=|in)",
 "position kind": r"PositionKind\.[A-Z_]+|positions_kind\s*(==|!=|in)|positions\.kind\s*(==|!=|in)",
}
for k, pat in PAT.items():
    per = collections.Counter()
    for p in py + tpl:
        n = len(re.findall(pat, p.read_text()))
        if n: per[str(p.relative_to(root))] += n
    tplc = sum(1 for f in per if f.startswith("templates"))
    print(f"dispatch on {k:14s}: {sum(per.values()):3d} sites in {len(per):2d} files ({tplc} templates)")
big = sorted(((lines(p), str(p.relative_to(root))) for p in py), reverse=True)[:5]
print("largest modules:", ", ".join(f"{f} {n}" for n, f in big))
print("modules over 400 lines:", sum(1 for p in py if lines(p) > 400))
def maxdepth(text):
    d = m = 0
    for tok in re.findall(r"\{%-?\s*(if|endif|macro|endmacro)\b", text):
        if tok == "if": d += 1; m = max(m, d)
        elif tok == "endif": d -= 1
    return m
def blockdepth(text):
    d = m = 0
    for tok in re.findall(r"\{%-?\s*(if|endif|for|endfor)\b", text):
        if tok in ("if", "for"): d += 1; m = max(m, d)
        else: d -= 1
    return m
print("max if+for block nesting:", max(((blockdepth(p.read_text()), str(p.relative_to(root))) for p in tpl)))
print("template if/elif:", sum(len(re.findall(r"\{%-?\s*(if|elif)\b", p.read_text())) for p in tpl),
      " max if-nesting:", max(maxdepth(p.read_text()) for p in tpl), max(((maxdepth(p.read_text()), str(p.relative_to(root))) for p in tpl)))
