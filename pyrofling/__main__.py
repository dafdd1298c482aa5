# Guarded, and importing nothing otherwise: a worker process the host spawns imports this module as its main.
if __name__ == "__main__":
    import sys

    from pyrofling.cli import main

    sys.exit(main())
