from tfcluster.cli import main

main()
