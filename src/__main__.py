from infermatrix.cli import main

main()
