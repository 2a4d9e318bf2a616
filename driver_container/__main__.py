from driver_container.cli import main

main()
