"""Runs `fencewatch check --format json -` on a pseudo-terminal as a user would: types one
event line, then Ctrl-D once, then a second line. Prints the JSON report. A check that stops at
the first end of input reports one event; one that reads past it hangs (the test times out)
or reports two.

usage: tty_check.py FENCEWATCH CONTRACT LINE1 LINE2
"""
import os
import pty
import select
import sys
import termios
import time

fencewatch, contract, line1, line2 = sys.argv[1:5]
pid, fd = pty.fork()
if pid == 0:
    # No echo, so that only the report is read back; the line discipline stays canonical, where
    # Ctrl-D ends the input.
    attrs = termios.tcgetattr(0)
    attrs[3] &= ~termios.ECHO
    termios.tcsetattr(0, termios.TCSANOW, attrs)
    os.execv(fencewatch, [fencewatch, "check", "--contract", contract, "--format", "json", "-"])

out = b""
deadline = time.monotonic() + 20


def pump(until):
    global out
    while time.monotonic() < until:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return False
            if not chunk:
                return False
            out += chunk
    return True


time.sleep(0.3)
os.write(fd, line1.encode() + b"\n")
pump(time.monotonic() + 0.3)
os.write(fd, b"\x04")  # Ctrl-D: the end of input
pump(time.monotonic() + 0.5)
try:
    os.write(fd, line2.encode() + b"\n")
    os.write(fd, b"\x04")
except OSError:
    pass  # already exited and closed the terminal
while pump(deadline) and time.monotonic() < deadline:
    pass
done = 0
while done == 0 and time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    time.sleep(0.02)
if done == 0:
    os.kill(pid, 9)
    sys.exit("fencewatch check did not exit after the terminal's end of input")
text = out.decode(errors="replace")
start = text.find("{")
print(text[start:].replace("\r\n", "\n") if start >= 0 else text)
