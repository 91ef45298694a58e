#!/usr/bin/env python3
"""The instruction mix of the f32 GEMM candidates' main loops, from `nvdisasm -c` output.

    nvdisasm -c matmul.cubin > m.sass && tools/sgemm_sass.py m.sass [symbol-substring]

For each function, each loop (a backward branch) with more than 100 FFMAs: its length, the count of each
opcode, LDS by width per FFMA, and the register-bank estimate the 2026-12-02 record used (an FFMA whose
register-file sources, after the operand reuse cache, include two of one bank, bank = register mod 2),
which tracked ncu's dispatch stalls there. A loop's FFMAs that consume a value the reuse cache holds
(the previous instruction set `.reuse` on the same slot and register) read nothing for that slot.
"""
import collections
import re
import sys

INS = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
LABEL = re.compile(r"^(\.L_x_\d+):")
FUNC = re.compile(r"^\.text\.(\S+):")
REG = re.compile(r"^-?\|?R(\d+)\|?(\.reuse)?")


def functions(lines):
    funcs = collections.OrderedDict()
    fn = None
    for line in lines:
        m = FUNC.match(line)
        if m:
            fn = m.group(1)
            funcs[fn] = ([], {})
            continue
        if fn is None:
            continue
        m = LABEL.match(line)
        if m:
            funcs[fn][1][m.group(1)] = len(funcs[fn][0])
            continue
        m = INS.match(line)
        if m:
            funcs[fn][0].append(m.group(2))
    return funcs


def opcode(ins):
    t = ins.split()
    return t[1] if t[0].startswith("@") else t[0]


def bank_conflicts(body):
    """FFMAs, and those of them with two register-file reads of one bank."""
    held = {}
    total = conflicts = 0
    for ins in body:
        op = opcode(ins)
        if not op.startswith("FFMA"):
            held = {}
            continue
        ops = [o.strip() for o in ins[ins.index(op) + len(op):].split(",")]
        banks = []
        cached = {}
        for slot, o in enumerate(ops[1:4]):
            r = REG.match(o)
            if not r:
                continue
            reg = int(r.group(1))
            if held.get(slot) != reg:
                banks.append(reg % 2)
            if r.group(2):
                cached[slot] = reg
        held = cached
        total += 1
        if banks.count(0) >= 2 or banks.count(1) >= 2:
            conflicts += 1
    return total, conflicts


def main():
    lines = open(sys.argv[1]).read().split("\n")
    want = sys.argv[2] if len(sys.argv) > 2 else None
    for fn, (ins, labels) in functions(lines).items():
        if want and want not in fn:
            continue
        for i, s in enumerate(ins):
            m = re.search(r"BRA\s.*`\((\.L_x_\d+)\)", s)
            if not (m and m.group(1) in labels and labels[m.group(1)] <= i):
                continue
            body = ins[labels[m.group(1)] : i + 1]
            ops = collections.Counter(opcode(b) for b in body)
            ffma = sum(v for k, v in ops.items() if k.startswith("FFMA"))
            if ffma <= 100:
                continue
            base = collections.Counter()
            for k, v in ops.items():
                base[k.split(".")[0]] += v
            lds = {k: v for k, v in ops.items() if k.startswith("LDS")}
            total, conflicts = bank_conflicts(body)
            print(f"{fn}: loop of {len(body)} instructions, FFMA {ffma} ({100 * ffma / len(body):.1f}%)")
            print("  " + " ".join(f"{k}:{v}" for k, v in base.most_common()))
            print("  " + " ".join(f"{k}:{v} ({v / ffma:.4f}/FFMA)" for k, v in sorted(lds.items())))
            print(f"  register-bank conflicts (2-bank model): {conflicts} of {total} FFMAs ({100 * conflicts / total:.1f}%)")


if __name__ == "__main__":
    main()
