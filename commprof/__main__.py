from commprof.cli import run

run()
