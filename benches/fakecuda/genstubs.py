# Generates stubs for every symbol cudarc may load that the hand-written file lacks:
# each logs its name to stderr on its first call and returns 0 (success).
import re, sys
names, impl, out = sys.argv[1], sys.argv[2], sys.argv[3]
have = set(re.findall(r'^\S.*?\b([A-Za-z_][A-Za-z0-9_]*)\s*\(', open(impl).read(), re.M))
lines = ['#include <stdio.h>', 'static int fake_stub_hit(const char *n, int *seen) {',
         '    if (!__atomic_exchange_n(seen, 1, __ATOMIC_RELAXED)) fprintf(stderr, "FAKECUDA stub called: %s\\n", n);',
         '    return 0;', '}']
for n in open(names).read().split():
    if n in have: continue
    lines.append(f'int {n}() {{ static int s; return fake_stub_hit("{n}", &s); }}')
open(out, 'w').write('\n'.join(lines) + '\n')
