# The program profiled for the README's flame graph: Python indexing the
# words of its own standard library's sources. Every (word, file, line)
# goes into an index of lists; the counts are sorted and the index is
# written as JSON. Run with PYTHONMALLOC=malloc so that Python's small
# objects come from malloc too rather than from its own arenas.
import collections, json, os, re, sys, sysconfig

root = sysconfig.get_paths()["stdlib"]
word = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
index = collections.defaultdict(list)
counts = collections.Counter()
for dirpath, _, files in os.walk(root):
    if "test" in dirpath:
        continue
    for f in files:
        if not f.endswith(".py"):
            continue
        path = os.path.join(dirpath, f)
        try:
            text = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines()):
            for w in word.findall(line):
                index[w].append((path, n))
                counts[w] += 1
top = counts.most_common(20)
out = json.dumps({w: index[w][:50] for w, _ in top})
print(len(index), "words,", sum(counts.values()), "occurrences,", len(out), "bytes of JSON")
