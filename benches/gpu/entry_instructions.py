"""Prints the first bytes of chosen exported functions of a shared library.

Why: an x86 uprobe on an instruction the kernel can emulate (push, nop, jmp, call) costs one
trap; any other instruction is single-stepped out of line, which costs a second trap. The
bytes at a function's entry say which case a probe on it is.

Usage: python3 entry_instructions.py [--offsets] LIB NAME [NAME ...]   (NAME may end with * for
a prefix). With --offsets, prints each function's file offset (what a uprobe attaches to) instead.
"""
import os
import struct
import sys


def exported_functions(path):
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    loads = []
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type == 1:
            loads.append((p_vaddr, p_offset, p_filesz))
    out = {}
    for sec in sections:
        if sec[1] != 11:  # SHT_DYNSYM
            continue
        strtab = sections[sec[6]]
        for j in range(sec[5] // 24):
            name_off, info, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", data, sec[4] + j * 24)
            if (info & 0xF) != 2 or shndx == 0:
                continue
            start = strtab[4] + name_off
            name = data[start:data.index(b"\0", start)].decode()
            for vaddr, offset, size in loads:
                if vaddr <= value < vaddr + size:
                    at = value - vaddr + offset
                    out[name] = (at, data[at:at + 16])
    return out


args = sys.argv[1:]
offsets = args[:1] == ["--offsets"]
if offsets:
    args = args[1:]
lib = os.path.realpath(args[0])
functions = exported_functions(lib)
if not offsets:
    print("library", lib)
for wanted in args[1:]:
    names = sorted(n for n in functions if (n.startswith(wanted[:-1]) if wanted.endswith("*") else n == wanted))
    for name in names:
        at, code = functions[name]
        print(f"{name} {at:#x}" if offsets else f"{name:32} {code.hex(' ')}")
