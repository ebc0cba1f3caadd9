"""The findings of issue 21, measured: each scenario in a fresh process against one source tree.

    python bench/tools_findings.py                 # this checkout
    git worktree add /tmp/before 42368ec && python bench/tools_findings.py --tree /tmp/before   # before

Prints one line per scenario: wall time, the process's peak RSS (and its children's), and what
happened. The numbers in docs/security.md's findings table come from these two runs. Every scenario
is bounded (120 s per process; the race runs 5 s), temp dirs only, no network.
"""

# ruff: noqa: E501 -- the scenarios are scripts in strings, kept one statement per line as they run
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

# Swaps the workspace folder ``d`` for a link to the outside folder and back, as fast as it can.
RACER = """
import os, sys
ws, out = sys.argv[1], sys.argv[2]
os.symlink(out, ws + "/.dlink")
while True:
    try:
        os.rename(ws + "/d", ws + "/.dreal")
        os.rename(ws + "/.dlink", ws + "/d")
        os.rename(ws + "/d", ws + "/.dlink")
        os.rename(ws + "/.dreal", ws + "/d")
    except OSError:
        pass
"""

PEAK_RSS = """
import resource as _r
print('RSS %d %d' % (_r.getrusage(_r.RUSAGE_SELF).ru_maxrss // 1024, _r.getrusage(_r.RUSAGE_CHILDREN).ru_maxrss // 1024))
"""

SNIPPETS = {
    "a{10000000}": """
from clawdesk.tools.builtins import BuiltinTools
from clawdesk.tools.jail import Workspace
from pathlib import Path
import tempfile
d=tempfile.mkdtemp(); open(d+'/a.txt','w').write('aaa\\n')
t=BuiltinTools(Workspace(d), Path(d+'/db'), read_max_bytes=10000, output_max_chars=10000)
r=t.call('search_files', {'pattern':'a{10000000}'}, 30); print(r.status, r.content[:90].replace('\\n',' '))
""",
    "huge line": """
from clawdesk.tools.builtins import BuiltinTools
from clawdesk.tools.jail import Workspace
from pathlib import Path
import tempfile
d=tempfile.mkdtemp()
with open(d+'/h.txt','wb') as f:
    f.write(b'x'*9000); f.truncate(300_000_000)
t=BuiltinTools(Workspace(d), Path(d+'/db'), read_max_bytes=10000, output_max_chars=10000)
r=t.call('read_file', {'path':'h.txt'}, 30); print(r.status, len(r.content))
""",
    "1100 nested": """
import os, tempfile
from clawdesk.tools.builtins import BuiltinTools
from clawdesk.tools.jail import Workspace
from pathlib import Path
d=tempfile.mkdtemp(); fd=os.open(d, os.O_RDONLY)
for _ in range(1100):
    os.mkdir('d', dir_fd=fd); n=os.open('d', os.O_RDONLY, dir_fd=fd); os.close(fd); fd=n
t=BuiltinTools(Workspace(d), Path(d+'/db'), read_max_bytes=10000, output_max_chars=10000)
try:
    r=t.call('search_files', {'pattern':'x'}, 30); print(r.status, r.content[:80].replace('\\n',' '))
except BaseException as e: print('raised', type(e).__name__)
os.system('rm -rf '+d)
""",
    "fifo search": """
import os, tempfile, threading
from clawdesk.tools.builtins import BuiltinTools
from clawdesk.tools.jail import Workspace
from pathlib import Path
d=tempfile.mkdtemp(); os.mkfifo(d+'/p'); open(d+'/a.txt','w').write('hit\\n')
t=BuiltinTools(Workspace(d), Path(d+'/db'), read_max_bytes=10000, output_max_chars=10000)
box=[]
th=threading.Thread(target=lambda: box.append(t.call('search_files', {'pattern':'hit'}, 30)), daemon=True); th.start(); th.join(10)
print(box[0].status if box else 'HUNG (10 s limit)')
""",
    "env leak": """
import os, tempfile
os.environ['HF_TOKEN']='hf_SECRET'
from clawdesk.tools.builtins import BuiltinTools
from clawdesk.tools.jail import Workspace
from pathlib import Path
d=tempfile.mkdtemp()
t=BuiltinTools(Workspace(d), Path(d+'/db'), read_max_bytes=10000, output_max_chars=10000)
r=t.call('run_shell', {'command':'env'}, 30); print('HF_TOKEN leaked' if 'hf_SECRET' in r.content else 'no HF_TOKEN', '; vars:', r.content.count('='))
""",
    "write outside": """
import os, tempfile
from clawdesk.tools.builtins import BuiltinTools
from clawdesk.tools.jail import Workspace
from pathlib import Path
d=tempfile.mkdtemp(); ws=d+'/ws'; os.mkdir(ws)
t=BuiltinTools(Workspace(ws), Path(d+'/db'), read_max_bytes=10000, output_max_chars=10000)
r=t.call('run_shell', {'command':'echo x > ../outside.txt'}, 30); print('wrote outside' if os.path.exists(d+'/outside.txt') else 'refused')
""",
    "setsid survivor": """
import os, tempfile, time
from clawdesk.tools.builtins import BuiltinTools
from clawdesk.tools.jail import Workspace
from pathlib import Path
d=tempfile.mkdtemp()
t=BuiltinTools(Workspace(d), Path(d+'/db'), read_max_bytes=10000, output_max_chars=10000)
t0=time.monotonic(); r=t.call('run_shell', {'command':'setsid sleep 300 & echo $! > pid'}, 30); took=time.monotonic()-t0
pid=int(open(d+'/pid').read()); time.sleep(0.3)
alive=os.path.exists(f'/proc/{pid}') and open(f'/proc/{pid}/stat').read().rsplit(')',1)[1].split()[0]!='Z'
print('survivor alive' if alive else 'survivor killed', f'call {took:.2f} s')
if alive: os.kill(pid, 9)
""",
    "hard link write": """
import os, tempfile
from clawdesk.tools.builtins import BuiltinTools
from clawdesk.tools.jail import Workspace
from pathlib import Path
d=tempfile.mkdtemp(); ws=d+'/ws'; os.mkdir(ws); open(d+'/victim','w').write('orig'); os.link(d+'/victim', ws+'/l')
t=BuiltinTools(Workspace(ws), Path(d+'/db'), read_max_bytes=10000, output_max_chars=10000)
r=t.call('read_file', {'path':'l'}, 30); w=t.call('write_file', {'path':'l','content':'pwned'}, 30)
print('read', 'outside text' if 'orig' in r.content else 'refused', '/ write', 'victim overwritten' if open(d+'/victim').read()!='orig' else 'victim intact')
""",
    "folder race": """
import os, subprocess, sys, tempfile, time
from clawdesk.tools.builtins import BuiltinTools
from clawdesk.tools.jail import Workspace
from pathlib import Path
d=tempfile.mkdtemp(); ws=d+'/ws'; out=d+'/out'; os.makedirs(ws+'/d'); os.mkdir(out)
open(ws+'/d/f.txt','w').write('inside'); open(out+'/f.txt','w').write('SECRET')
racer=subprocess.Popen([sys.executable, '-c', RACER, ws, out])
t=BuiltinTools(Workspace(ws), Path(d+'/db'), read_max_bytes=10000, output_max_chars=10000)
n=leaked=0; end=time.monotonic()+5
try:
    while time.monotonic()<end:
        r=t.call('read_file', {'path':'d/f.txt'}, 30); n+=1; leaked+='SECRET' in r.content
finally:
    racer.kill(); racer.wait()
print(f'{leaked} of {n} reads returned the outside file')
""",
}


def run(tree: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(tree))
    for name, code in SNIPPETS.items():
        started = time.monotonic()
        script = f"RACER = {RACER!r}\n{code}\n{PEAK_RSS}"
        # cwd = the tree: `python -c` puts the working directory first on sys.path.
        proc = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tree
        )
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        took = time.monotonic() - started
        lines = out.decode().strip().splitlines()
        rss = next((line for line in lines if line.startswith("RSS ")), "RSS ? ?").split()
        result = next((line for line in reversed(lines) if not line.startswith("RSS ")), "")
        print(
            f"{name:16s} | {took:6.2f} s | peak RSS {rss[1]} MB (+ child processes {rss[2]} MB) | {result}", flush=True
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tree", type=Path, default=Path(__file__).resolve().parent.parent, help="source tree to import clawdesk from"
    )
    run(parser.parse_args().tree.resolve())


if __name__ == "__main__":
    main()
