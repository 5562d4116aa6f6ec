from alcheck.cli.main import main

main()
