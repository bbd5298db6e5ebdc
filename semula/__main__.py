from semula.cli import main

main()
