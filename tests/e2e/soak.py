#!/usr/bin/env python3
"""Soak test: random damage to bundles and GGUF files, and files replaced,
truncated or overwritten under a running model. Every run must end with
exit 0 or 2 (bad input, one line on stderr): never a signal, never another
status, never a sanitizer report. Time-boxed; prints a table of the cases
it ran.

Usage: soak.py SPARROW_BIN SHARED_DIR [SECONDS] [SEED]
SECONDS defaults to $SPARROW_SOAK_SECONDS, else 20; SEED to the clock (it
is printed, so a failure can be replayed).
"""
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib

SPARROW, SHARED = sys.argv[1], sys.argv[2]
SECONDS = float(sys.argv[3]) if len(sys.argv) > 3 else float(
    os.environ.get("SPARROW_SOAK_SECONDS", "20"))
SEED = int(sys.argv[4]) if len(sys.argv) > 4 else int(time.time())
RUN_TIMEOUT = 120  # seconds per run; ASan builds are several times slower
SANITIZER_MARKS = (b"AddressSanitizer", b"UndefinedBehaviorSanitizer", b"runtime error:",
                   b"LeakSanitizer")


def crc32c(data, crc=0):
    """CRC32C (Castagnoli), bitwise: only used on the small header region."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


class Soak:
    def __init__(self, work, rng):
        self.work = work
        self.rng = rng
        self.counts = {}  # case -> [runs, exit 0, exit 2]
        self.bad = []     # descriptions of runs that broke the rules

    def record(self, case, cmd, proc_rc, stderr):
        runs = self.counts.setdefault(case, [0, 0, 0])
        runs[0] += 1
        problem = None
        if any(m in stderr for m in SANITIZER_MARKS):
            problem = "sanitizer report"
        elif proc_rc is None:
            problem = "timed out"
        elif proc_rc < 0:
            problem = "killed by signal %d" % -proc_rc
        elif proc_rc == 0:
            runs[1] += 1
        elif proc_rc == 2:
            runs[2] += 1
            # Progress lines may come first; the error is one line, the last.
            lines = stderr.decode(errors="replace").splitlines()
            errors = [l for l in lines if l.startswith("error: ")]
            if len(errors) != 1 or lines[-1] != errors[0]:
                problem = "exit 2 without exactly one error line, the last"
        else:
            problem = "exit %d" % proc_rc
        if problem:
            self.bad.append("%s: %s: %s\n    stderr: %s" % (
                case, problem, " ".join(cmd), stderr.decode(errors="replace")[-600:]))

    def run(self, case, cmd):
        try:
            p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               timeout=RUN_TIMEOUT)
            self.record(case, cmd, p.returncode, p.stderr)
        except subprocess.TimeoutExpired as e:
            self.record(case, cmd, None, e.stderr or b"")

    def path(self, name):
        return os.path.join(self.work, name)


def sparrow(*args):
    subprocess.run([SPARROW, *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def restamp_bundle(data):
    """Recomputes a bundle's header CRC so damage reaches the structure checks."""
    if len(data) < 64 or data[:4] != b"SPRW":
        return data
    end = struct.unpack_from("<Q", data, 16)[0]
    if not 64 < end <= len(data) or end > (1 << 20):
        return data
    crc = crc32c(data[64:end], crc32c(data[:60]))
    return data[:60] + struct.pack("<I", crc) + data[64:]


def mutate(rng, data, is_bundle, header_end):
    """One random kind of damage; returns (name, bytes)."""
    data = bytearray(data)
    kind = rng.choice(["flip", "flip-header", "flip-header-restamped", "truncate", "append",
                       "zero-range", "swap-ranges", "u64-header"])
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind in ("flip-header", "flip-header-restamped"):
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(min(len(data), header_end))] ^= 1 << rng.randrange(8)
        if kind.endswith("restamped") and is_bundle:
            data = bytearray(restamp_bundle(bytes(data)))
    elif kind == "truncate":
        data = data[:rng.randrange(len(data))]
    elif kind == "append":
        data += bytes(rng.randrange(256) for _ in range(rng.choice([1, 7, 4096, 5000])))
    elif kind == "zero-range":
        at = rng.randrange(len(data))
        n = rng.choice([1, 64, 4096, 65536])
        data[at:at + n] = bytes(len(data[at:at + n]))
    elif kind == "swap-ranges":
        n = rng.choice([64, 4096])
        a, b = rng.randrange(len(data) - n), rng.randrange(len(data) - n)
        data[a:a + n], data[b:b + n] = data[b:b + n], data[a:a + n]
    elif kind == "u64-header":
        # An extreme value in a length/offset-sized slot of the header.
        at = rng.randrange(0, max(8, min(len(data), header_end) - 8)) & ~7
        value = rng.choice([0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1, len(data)])
        data[at:at + 8] = struct.pack("<Q", value)[:len(data[at:at + 8])]
        if is_bundle:
            data = bytearray(restamp_bundle(bytes(data)))
    return kind, bytes(data)


def command(rng, model, text):
    what = rng.choice(["run", "run", "perplexity", "info"])
    if what == "run":
        cmd = [SPARROW, "run", "-m", model, "-p", "Once upon a time", "-n", "6", "--temp", "0",
               "-t", "1"]
        if model.endswith(".sparrow"):
            cmd += ["--io", rng.choice(["pread", "direct", "mmap"])]
            if rng.random() < 0.5:
                cmd += ["--dram-budget", "40M"]
        return what, cmd
    if what == "perplexity":
        return what, [SPARROW, "perplexity", "-m", model, "-f", text, "-c", "32", "--chunks",
                      "1", "-t", "1"]
    return what, [SPARROW, "info", "-m", model, "--verify"]


def minimum_budget_kib(model):
    """The least --dram-budget the model runs with, from the error a 1M budget gives."""
    p = subprocess.run([SPARROW, "run", "-m", model, "-p", "hi", "-c", "512", "--dram-budget",
                        "1M"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    text = p.stderr.decode()
    marker = "the minimum for this model is "
    at = text.index(marker) + len(marker)
    return int(float(text[at:].split()[0]) * 1024)


def race(soak, rng, racers, text):
    """A file replaced, truncated or overwritten while a run reads it: a
    budget just above the minimum keeps the run reading records."""
    names = list(racers)
    name = rng.choice(names)
    target = soak.path("race-" + name)
    shutil.copyfile(soak.path(name), target)
    io = rng.choice(["pread", "direct", "mmap"])
    cmd = [SPARROW, "run", "-m", target, "-p", "Once upon a time", "-n", "400", "-c", "512",
           "--temp", "0", "-t", "1", "--io", io, "--dram-budget", "%dK" % racers[name]]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(rng.uniform(0.05, 0.8))  # a run takes 1-2 s (much longer under ASan)
    action = rng.choice(["rename-over", "truncate", "overwrite-in-place", "unlink"])
    size = os.path.getsize(target)
    if action == "rename-over":
        other = rng.choice(names)
        tmp = target + ".new"
        shutil.copyfile(soak.path(other), tmp)
        os.rename(tmp, target)
    elif action == "truncate":
        os.truncate(target, rng.randrange(size))
    elif action == "overwrite-in-place":
        with open(target, "r+b") as f:
            f.seek(rng.randrange(size))
            f.write(bytes(rng.randrange(256) for _ in range(rng.choice([1, 4096, 65536]))))
    else:
        os.unlink(target)
    try:
        _, err = proc.communicate(timeout=RUN_TIMEOUT)
        soak.record("race: " + action + " (" + io + ")", cmd, proc.returncode, err)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        soak.record("race: " + action + " (" + io + ")", cmd, None, err)


def main():
    rng = random.Random(SEED)
    work = tempfile.mkdtemp(prefix="sparrow_soak_")
    try:
        soak = Soak(work, rng)
        gguf = soak.path("m.gguf")
        sparrow("synth", "-o", gguf, "--dim", "64", "--ffn", "128", "--layers", "2", "--heads",
                "2", "--vocab", "400", "--type", "q8_0", "--seed", "4")
        originals = {"m.gguf": None}
        for layout, rtype in [("neuron", "q8_0"), ("dip", "f16"), ("split", "q4_0")]:
            name = "m-%s-%s.sparrow" % (layout, rtype)
            sparrow("convert", "-m", gguf, "-o", soak.path(name), "--layout", layout, "--type",
                    rtype)
            originals[name] = None
        shutil.copyfile(os.path.join(SHARED, "models", "stories260K.gguf"),
                        soak.path("stories.gguf"))
        originals["stories.gguf"] = None
        # Race targets: 3 MiB of FFN records, more than a tight budget holds.
        big = soak.path("race.gguf")
        sparrow("synth", "-o", big, "--dim", "128", "--ffn", "512", "--layers", "4", "--heads",
                "4", "--vocab", "1000", "--type", "f32", "--seed", "9")
        racers = {}
        for layout in ["neuron", "dip"]:
            name = "race-%s.sparrow" % layout
            sparrow("convert", "-m", big, "-o", soak.path(name), "--layout", layout, "--type",
                    "f32")
            racers[name] = minimum_budget_kib(soak.path(name)) + 512
        for name in originals:
            with open(soak.path(name), "rb") as f:
                originals[name] = f.read()
        text = soak.path("text.txt")
        with open(os.path.join(SHARED, "corpora", "tinystories_val_excerpt.txt"), "rb") as f:
            data = f.read(4000)
        with open(text, "wb") as f:
            f.write(data)

        deadline = time.monotonic() + SECONDS
        iteration = 0
        while time.monotonic() < deadline:
            iteration += 1
            if iteration % 8 == 0:
                race(soak, rng, racers, text)
                continue
            name = rng.choice(list(originals))
            data = originals[name]
            is_bundle = name.endswith(".sparrow")
            header_end = struct.unpack_from("<Q", data, 16)[0] if is_bundle else 4096
            kind, damaged = mutate(rng, data, is_bundle, header_end)
            model = soak.path("damaged" + os.path.splitext(name)[1])
            with open(model, "wb") as f:
                f.write(damaged)
            what, cmd = command(rng, model, text)
            soak.run("%s %s: %s" % ("bundle" if is_bundle else "gguf", kind, what), cmd)

        total = sum(c[0] for c in soak.counts.values())
        print("soak: seed %d, %d runs in %.0f s" % (SEED, total, SECONDS))
        print("| case | runs | exit 0 | exit 2 |")
        print("|---|---:|---:|---:|")
        for case in sorted(soak.counts):
            runs, ok, bad_input = soak.counts[case]
            print("| %s | %d | %d | %d |" % (case, runs, ok, bad_input))
        print("soak: %d runs broke the rules (a signal, another exit status, a sanitizer "
              "report, or a malformed error)" % len(soak.bad))
        for line in soak.bad[:20]:
            print("  " + line)
        return 1 if soak.bad else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
