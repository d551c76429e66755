# gdb -batch -x tests/rseq_lock_count.py --args PROGRAM ARGS, with
# RSEQ_LOCK_LIB naming the preloaded libpcpalloc.so (run by tests/rseq.rs).
# Puts a breakpoint on every lock-prefixed and xchg instruction of the
# library (objdump) and counts, by function, those executed between each
# rseq_mark_start() and rseq_mark_end() of the program: one line
# "window N FUNCTION COUNT" each, then "done".
import collections, os, re, subprocess
import gdb

lib = os.environ['RSEQ_LOCK_LIB']
dis = subprocess.run(['objdump', '-d', '--no-show-raw-insn', lib],
                     capture_output=True, text=True, check=True).stdout
sites = [int(m.group(1), 16) for m in
         re.finditer(r'^\s+([0-9a-f]+):\s+(?:lock |xchg )', dis, re.M)]
gdb.execute('set pagination off')
gdb.execute('set confirm off')
gdb.execute('break rseq_mark_start')
gdb.execute('run', to_string=True)
base = None
for l in gdb.execute('info proc mappings', to_string=True).split('\n'):
    f = l.split()
    if len(f) >= 5 and f[-1] == os.path.realpath(lib) and base is None:
        base = int(f[0], 16) - int(f[3], 16)
for off in sites:
    b = gdb.Breakpoint('*0x%x' % (base + off), internal=True)
    b.silent = True
gdb.Breakpoint('rseq_mark_end')
window, inside, hits = 0, True, collections.Counter()
while True:
    try:
        gdb.execute('continue', to_string=True)
        pc = int(gdb.parse_and_eval('$pc'))
    except gdb.error:
        break
    f = gdb.execute('info symbol 0x%x' % pc, to_string=True)
    f = re.sub(r' \+ \d+ in section.*| in section.*', '', f.strip())
    if f.startswith('rseq_mark_end'):
        for name, n in hits.most_common():
            print('window %d %s %d' % (window, name, n))
        window, inside, hits = window + 1, False, collections.Counter()
    elif f.startswith('rseq_mark_start'):
        inside = True
    elif inside:
        hits[re.sub(r'::h[0-9a-f]{16}$', '', f)] += 1
print('done')
