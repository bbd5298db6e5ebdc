from semula.surfaces.cli import main

main()
